//! Wake-cost budgets end to end: a stream of failed logins from one source
//! wakes the instance at most the budget's number of times and is then refused with ERR 1129
//! without a wake; the block is listed and cleared with `relay blocks`; a real HAProxy's
//! `option mysql-check user haproxy` is answered by the relay without a wake.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::io::{Read as _, Write as _};
use std::process::{Command, Stdio};
use std::time::Duration;

use tests::relay::{PASSWORD, Relay, RelayOptions, USER};
use tests::{ChildGuard, TempDir, bin_path, free_port, raw};

const WAKES_OK: &str = "relay_wakes_total{instance=\"demo\",outcome=\"ok\"}";

/// One login with a wrong password, from a paused instance: the code of the ERR the client
/// ends with (1045 from the compute, or the relay's refusal, which comes in place of the
/// greeting for a blocked source).
fn failed_login(relay: &Relay) -> u16 {
    let mut s = raw::connect(relay.port).unwrap();
    let (_, first) = raw::read_packet(&mut s).unwrap();
    if first.first() == Some(&0xFF) {
        return raw::err_of(&first).0;
    }
    drop(s);
    let code = match raw::login(relay.port, USER, "not-the-password", None) {
        Ok(Err((code, _))) => code,
        Ok(Ok(_)) => panic!("a wrong password was accepted"),
        Err(e) => {
            // Blocked between the two connections: the greeting was an ERR.
            let mut s = raw::connect(relay.port).unwrap();
            let (_, first) = raw::read_packet(&mut s).unwrap();
            assert_eq!(first.first(), Some(&0xFF), "{e}");
            raw::err_of(&first).0
        }
    };
    if relay.state() == "running" {
        relay.pause();
    }
    code
}

/// `attempts` failed logins against a relay with `budgets` (an inline TOML table): the codes
/// seen and the wakes caused.
fn failed_login_stream(
    label: &str,
    budgets: &str,
    attempts: usize,
) -> (Vec<u16>, f64, Relay, TempDir) {
    let dir = TempDir::new(label);
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            relay_toml: format!("budgets = {budgets}\n"),
            ..RelayOptions::default()
        },
    );
    let codes: Vec<u16> = (0..attempts).map(|_| failed_login(&relay)).collect();
    let wakes = relay.metric(WAKES_OK);
    (codes, wakes, relay, dir)
}

#[test]
fn failed_logins_from_one_source_wake_at_most_the_budget_then_are_refused() {
    const ATTEMPTS: usize = 10;
    let (codes, unlimited_wakes, _r0, _d0) = failed_login_stream(
        "budgets-off",
        "{ failed_logins_per_source = 0, failed_logins_per_user = 0, wakes_per_source = 0, \
         failed_wakes_per_source = 0, \
         wakes_per_user = 0 }",
        ATTEMPTS,
    );
    assert_eq!(codes, vec![1045; ATTEMPTS]);
    let (codes, budget_wakes, relay, _dir) =
        failed_login_stream("budgets-on", "{ failed_logins_per_source = 3 }", ATTEMPTS);
    eprintln!(
        "{ATTEMPTS} failed logins from one source: {unlimited_wakes} wakes without budgets, \
         {budget_wakes} with failed_logins_per_source = 3"
    );
    assert_eq!(unlimited_wakes, ATTEMPTS as f64);
    assert_eq!(budget_wakes, 3.0);
    assert_eq!(&codes[..3], &[1045; 3]);
    assert_eq!(&codes[3..], &[1129; ATTEMPTS - 3]);
    assert_eq!(relay.state(), "paused");
    assert_eq!(
        relay.metric(
            "relay_budget_refusals_total{instance=\"demo\",reason=\"source_failed_logins\"}"
        ),
        (ATTEMPTS - 3) as f64
    );
    assert_eq!(
        relay.metric("relay_budget_blocks{scope=\"source\",budget=\"failed_logins\"}"),
        1.0
    );
    // Even the right password is refused from a blocked source, and a real client says why.
    let out = tests::mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1");
    assert_ne!(out.code, Some(0));
    assert!(
        out.stderr.contains("1129")
            && out
                .stderr
                .contains("is blocked because of many failed logins"),
        "{}",
        out.stderr
    );

    // The CLI lists the block and clears it; the right password then gets through.
    let cli = |args: &[&str]| {
        let out = Command::new(bin_path("relay"))
            .args(args)
            .arg("--admin")
            .arg(format!("127.0.0.1:{}", relay.admin_port))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let list = cli(&["blocks", "list"]);
    assert!(
        list.lines().any(|l| l.starts_with("source")
            && l.contains("127.0.0.1")
            && l.contains("failed_logins")),
        "{list}"
    );
    assert_eq!(
        cli(&["blocks", "clear", "--source", "127.0.0.1"]),
        "cleared 1 block(s)\n"
    );
    assert_eq!(
        cli(&["blocks", "clear", "--source", "127.0.0.1"]),
        "cleared 0 block(s)\n"
    );
    assert_eq!(relay.admin("GET", "/v1/blocks").1.trim(), "[]");
    let out = tests::mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1");
    assert_eq!(out.code, Some(0), "{}", out.stderr);
}

/// HAProxy's `show stat` line for the relay server: `(status, check_status)`.
fn haproxy_check(socket: &std::path::Path) -> Option<(String, String)> {
    let mut s = std::os::unix::net::UnixStream::connect(socket).ok()?;
    s.set_read_timeout(Some(tests::scaled(Duration::from_secs(10))))
        .ok()?;
    s.write_all(b"show stat\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let header = out.lines().next()?.trim_start_matches("# ");
    let cols: Vec<&str> = header.split(',').collect();
    let col = |name: &str| cols.iter().position(|c| *c == name);
    let line = out.lines().find(|l| l.starts_with("db,relay,"))?;
    let fields: Vec<&str> = line.split(',').collect();
    Some((
        fields.get(col("status")?)?.to_string(),
        fields.get(col("check_status")?)?.to_string(),
    ))
}

/// Runs a real HAProxy with `option mysql-check user haproxy` against the relay until `until`
/// (given HAProxy's stats socket) holds, then stops it: HAProxy's view of the server. Its
/// listening port is picked free; one another process took meanwhile makes HAProxy exit at
/// once, and it is started again on another (three tries), its output kept for the message.
fn run_haproxy(
    dir: &std::path::Path,
    relay: &Relay,
    until: impl Fn(&std::path::Path) -> bool,
) -> (String, String) {
    let socket = dir.join("haproxy.sock");
    let config = dir.join("haproxy.cfg");
    let log = dir.join("haproxy.log");
    for _ in 0..3 {
        std::fs::write(
            &config,
            format!(
                "global\n  stats socket {} mode 600 level admin\n\
                 defaults\n  mode tcp\n  timeout connect 10s\n  timeout check 10s\n  timeout client 30s\n  timeout server 30s\n\
                 listen db\n  bind 127.0.0.1:{}\n  option mysql-check user haproxy\n  \
                 server relay 127.0.0.1:{} check inter 100ms rise 1 fall 3\n",
                socket.display(),
                free_port(),
                relay.port
            ),
        )
        .unwrap();
        let mut haproxy = ChildGuard::new(
            Command::new("haproxy")
                .arg("-db")
                .arg("-f")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .expect("haproxy is installed (haproxy -v)"),
        );
        let pid = haproxy.pid().unwrap();
        let done = Relay::wait_until(Duration::from_secs(60), || {
            until(&socket) || !tests::relay::pid_alive(pid)
        });
        if done && until(&socket) {
            let seen = haproxy_check(&socket).unwrap_or_default();
            // Stopped by its PID.
            haproxy.kill9();
            return seen;
        }
        haproxy.kill9();
    }
    panic!(
        "haproxy checks did not arrive\nhaproxy: {}\n{}",
        std::fs::read_to_string(&log).unwrap_or_default(),
        relay.log()
    );
}

#[test]
fn a_real_haproxy_mysql_check_is_answered_without_a_wake() {
    let dir = TempDir::new("budgets-haproxy");
    let relay = Relay::start(dir.path(), RelayOptions::default());
    let checks = "relay_health_checks_total{instance=\"demo\"}";
    // (`timeout check` and `fall 3` above: one check slowed by a loaded machine does not mark
    // the server down.)
    let (status, check) = run_haproxy(dir.path(), &relay, |socket| {
        relay.metric(checks) >= 10.0 && haproxy_check(socket).is_some_and(|(s, _)| s == "UP")
    });
    assert_eq!((status.as_str(), check.as_str()), ("UP", "L7OK"));
    assert_eq!(relay.state(), "paused");
    assert_eq!(relay.metric(WAKES_OK), 0.0);
    assert_eq!(
        relay.metric("relay_connections_total{instance=\"demo\",outcome=\"health_check\"}"),
        relay.metric(checks)
    );

    // Without a health-check user (what every check did before): each check is a login that
    // wakes the instance, and the compute, which has no such account, refuses it.
    let dir = TempDir::new("budgets-haproxy-off");
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            instance_toml: "health_check_users = []\n".into(),
            ..RelayOptions::default()
        },
    );
    let denied = "relay_connections_total{instance=\"demo\",outcome=\"denied\"}";
    let (status, _) = run_haproxy(dir.path(), &relay, |socket| {
        relay.metric(denied) >= 1.0 && haproxy_check(socket).is_some_and(|(s, _)| s == "DOWN")
    });
    assert_eq!(status, "DOWN");
    assert!(relay.metric(WAKES_OK) >= 1.0);
}

/// Password guessing against a running instance (the direct route, where the relay copies
/// bytes) counts against the same budgets: past `failed_logins_per_source` the source gets
/// ERR 1129 in place of the greeting, and past `failed_logins_per_user` — from more than one
/// source — the user gets ERR 1226 before its login reaches the compute, even with the right
/// password. One source's guesses alone never lock the user out for everyone. Before, the
/// direct route counted nothing and guessing ran at about 1,400 guesses a second.
#[test]
fn password_guessing_on_a_running_instance_is_throttled_too() {
    let dir = TempDir::new("budgets-direct");
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            relay_toml: "budgets = { failed_logins_per_source = 4, failed_logins_per_user = 3 }\n"
                .into(),
            ..RelayOptions::default()
        },
    );
    // Wake it with a good login; everything below takes the direct route.
    let mut s = raw::login(relay.port, USER, PASSWORD, None)
        .unwrap()
        .unwrap();
    assert_eq!(relay.state(), "running");
    let forwarded = "relay_direct_connections_total{instance=\"demo\",outcome=\"forwarded\"}";
    let from = |source: &str, user: &str, password: &str| {
        login_code(relay.port, source.parse().unwrap(), user, password)
    };
    // Three wrong passwords for `app` from one source: past the user's 3, yet the user still
    // gets in from another source.
    for guess in ["guess-1", "guess-2", "guess-3"] {
        assert_eq!(from("127.0.0.1", USER, guess), 1045);
    }
    assert_eq!(from("127.0.0.2", USER, PASSWORD), 0);
    // A failure from a second source: now `app` is blocked everywhere, right password or not.
    assert_eq!(from("127.0.0.2", USER, "guess-4"), 1045);
    assert_eq!(from("127.0.0.3", USER, PASSWORD), 1226);
    assert!(
        relay.metric(forwarded) >= 5.0,
        "these took the direct route"
    );
    // Other users are guessed until the first source's budget is spent: then 1129 for
    // everyone from it.
    assert_eq!(from("127.0.0.1", "root", "guess-5"), 1045);
    assert_eq!(from("127.0.0.1", "root", "guess-6"), 1129);
    // The session opened before is untouched.
    assert_eq!(
        raw::query(&mut s, "SELECT 1").unwrap(),
        Ok(vec![Some("1".into())])
    );
    assert_eq!(relay.metric(WAKES_OK), 1.0);
}

/// The codes of `n` concurrent logins from `source` with a wrong password (1045 from the
/// compute; the relay's refusals in place of the greeting or after the login).
fn concurrent_guesses(port: u16, source: &str, n: usize) -> Vec<u16> {
    let source: std::net::IpAddr = source.parse().unwrap();
    let threads: Vec<_> = (0..n)
        .map(|i| {
            std::thread::spawn(move || {
                let code = login_code(port, source, USER, &format!("guess-{i}"));
                assert_ne!(code, 0, "a wrong password was accepted");
                code
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// One login from `source`: 0 if accepted, else the code of the ERR it ends with (the
/// compute's verdict, or the relay's refusal after the login or in place of the greeting).
fn login_code(port: u16, source: std::net::IpAddr, user: &str, password: &str) -> u16 {
    match raw::login_from(source, port, user, password, None) {
        Ok(Ok(_)) => 0,
        Ok(Err((code, _))) => code,
        Err(e) => {
            // Refused in place of the greeting: that ERR was the first packet.
            let mut s = raw::connect_from(source, port).unwrap();
            let (_, first) = raw::read_packet(&mut s).unwrap();
            assert_eq!(first.first(), Some(&0xFF), "{e}");
            raw::err_of(&first).0
        }
    }
}

/// 300 concurrent wrong logins from one source get exactly the budget's number of verdicts
/// (its 20 failed logins), at a paused instance (the logins held during the wake used to ride
/// through: 297 × 1045) and at a running one (33 got through); the rest are refused with ERR
/// 1129 and wake nothing more. The burst does not lock the real user out: from another address
/// the right password still logs in.
#[test]
fn a_burst_of_concurrent_guesses_gets_no_more_verdicts_than_the_budget() {
    let dir = TempDir::new("budgets-burst");
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            // The relay's own defaults, every budget included.
            relay_toml: "budgets = {}\n".into(),
            ..RelayOptions::default()
        },
    );
    let tally = |codes: &[u16]| {
        let mut t = std::collections::BTreeMap::new();
        for c in codes {
            *t.entry(*c).or_insert(0usize) += 1;
        }
        t
    };
    let paused = tally(&concurrent_guesses(relay.port, "127.0.0.1", 300));
    eprintln!("300 concurrent guesses at a paused instance: {paused:?}");
    assert_eq!(paused.get(&1045), Some(&20), "{paused:?}");
    assert_eq!(paused.get(&1129), Some(&280), "{paused:?}");
    assert_eq!(relay.metric(WAKES_OK), 1.0);
    let mut s = raw::login_from(
        "127.0.0.2".parse().unwrap(),
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
    // Running now: the same burst from another source takes the direct route.
    let running = tally(&concurrent_guesses(relay.port, "127.0.0.3", 300));
    eprintln!("300 concurrent guesses at a running instance: {running:?}");
    assert_eq!(running.get(&1045), Some(&20), "{running:?}");
    assert_eq!(running.get(&1129), Some(&280), "{running:?}");
}
