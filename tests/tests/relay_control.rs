//! The control plane end to end (issue: lifecycle, direct route, auto-pause, metering, admin
//! API, drivers): real relay, real server-shim, the stock `mariadb` CLI and PyMySQL.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use authplugin::packet::HandshakeV10;
use tests::relay::{KillOnDrop, PASSWORD, Relay, RelayOptions, USER, pid_alive};
use tests::{TempDir, bin_path, mariadb, python, raw};

fn classification_total(relay: &Relay) -> f64 {
    let (_, body) = relay.admin("GET", "/metrics");
    body.lines()
        .filter(|l| {
            l.starts_with("relay_classifications_total") || l.starts_with("relay_connections_total")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn greeting_connection_id(port: u16) -> u32 {
    let mut s = raw::connect(port).expect("connect");
    let (seq, payload) = raw::read_packet(&mut s).expect("greeting");
    assert_eq!(seq, 0);
    HandshakeV10::decode(&payload)
        .expect("a MySQL greeting")
        .connection_id
}

#[test]
fn after_a_resume_new_connections_take_the_direct_route() {
    let dir = TempDir::new("ctl-direct");
    let relay = Relay::start(dir.path(), RelayOptions::default());
    let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT USER()");
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let counted = classification_total(&relay);

    // The compute numbers its connections; a greeting read through the relay right after one
    // read from the compute itself carries the next number: it is the compute's own greeting.
    let direct_id = greeting_connection_id(relay.compute_port);
    let via_relay_id = greeting_connection_id(relay.port);
    assert_eq!(
        via_relay_id,
        direct_id + 1,
        "greeting via the relay comes from the compute"
    );

    let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT USER()");
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let wrong = mariadb(relay.port, USER, Some("wrong"), &[], "SELECT 1");
    assert!(
        wrong.stderr.contains("ERROR 1045"),
        "the compute itself refuses: {}",
        wrong.stderr
    );
    assert_eq!(
        classification_total(&relay),
        counted,
        "the perceptron saw none of these"
    );
    // The two logins were forwarded; the connection that only read a greeting never spoke,
    // so it was never a session (its close did not restart the idle clock).
    assert_eq!(
        relay.metric("relay_direct_connections_total{instance=\"demo\",outcome=\"forwarded\"}"),
        2.0
    );
    assert!(Relay::wait_until(Duration::from_secs(60), || relay.metric(
        "relay_direct_connections_total{instance=\"demo\",outcome=\"closed_silently\"}"
    ) == 1.0));
}

/// A client that connects to a running instance just before its idle pause is due, and
/// answers the compute's greeting only after (a client far away, or a slow one), still logs in
/// on the same compute: the connection counts from its accept, so the pause waits for it.
/// Before, it counted only from its first byte, and the pause stopped the compute under it.
#[test]
fn a_client_greeted_just_before_the_idle_pause_still_logs_in() {
    let dir = TempDir::new("ctl-idle-greeted");
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            idle_pause_after: "1s",
            ..RelayOptions::default()
        },
    );
    let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1");
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let pid = relay.compute_pid().expect("compute pid");
    let _cleanup = KillOnDrop(Some(pid));
    // The instance may have paused since (a loaded machine): wake it until a connection finds
    // it running and is greeted by the compute itself.
    let s = loop {
        let s = raw::connect(relay.port).unwrap();
        let mut first = [0u8; 4];
        s.peek(&mut first).unwrap();
        // Greeted while running: the compute's greeting (a paused instance's is the relay's,
        // and nothing but a login wakes it).
        if relay.state() == "running" {
            break s;
        }
        drop(s);
        assert_eq!(
            mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1").code,
            Some(0)
        );
    };
    let pid = relay.compute_pid().expect("compute pid");
    // Three idle periods pass while the client holds the greeting unanswered: the time
    // passing is the condition itself.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(relay.state(), "running", "{}", relay.log());
    s.set_read_timeout(Some(tests::scaled(Duration::from_secs(30))))
        .unwrap();
    let mut s = raw::login_on(s, USER, PASSWORD, None)
        .unwrap()
        .unwrap_or_else(|e| panic!("{e:?}\n{}", relay.log()));
    assert_eq!(raw::one_row(&mut s, "SELECT 7").as_deref(), Some("7"));
    assert_eq!(relay.compute_pid(), Some(pid), "the same compute");
    drop(s);
    relay.wait_state("paused", Duration::from_secs(60));
}

#[test]
fn idle_instances_pause_and_wake_again_and_an_open_idle_session_is_parked_not_cut() {
    let dir = TempDir::new("ctl-idle");
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            // Long enough that a loaded machine does not pause it before the test reads the
            // compute's PID after the first login.
            idle_pause_after: "4s",
            ..RelayOptions::default()
        },
    );
    let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1");
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let pid = relay.compute_pid().expect("compute pid");
    let _cleanup = KillOnDrop(Some(pid));
    assert!(
        Relay::wait_until(Duration::from_secs(60), || !pid_alive(pid)),
        "compute {pid} still runs after the idle period\n{}",
        relay.log()
    );
    // The compute is gone a moment before the pause is recorded.
    assert!(
        Relay::wait_until(Duration::from_secs(60), || relay.state() == "paused"),
        "{}",
        relay.state()
    );
    assert!(!relay.compute_listening());

    // The next client wakes it again; this session stays open, idle, longer than the period:
    // it is parked (the compute frozen under it) and its next query thaws the same compute.
    let session = python(
        relay.port,
        &format!(
            "import os, time, pymysql\n\
             c = pymysql.connect(host='127.0.0.1', port=int(os.environ['PORT']), user='{USER}', password='{PASSWORD}')\n\
             cur = c.cursor(); cur.execute('SELECT 1'); print(cur.fetchone()[0])\n\
             time.sleep(9)\n\
             cur.execute('SELECT 2'); print(cur.fetchone()[0]); c.close()\n"
        ),
        Duration::from_secs(60),
    );
    assert_eq!(session.code, Some(0), "{}\n{}", session.stderr, relay.log());
    assert_eq!(session.stdout, "1\n2\n", "the idle session survived");
    // Two starts and the thaw.
    assert_eq!(
        relay.metric("relay_wakes_total{instance=\"demo\",outcome=\"ok\"}"),
        3.0
    );
    let ledger = std::fs::read_to_string(dir.path().join("state/usage.ledger")).unwrap();
    assert!(ledger.contains(" frozen "), "{ledger}");
    // With the session gone, the frozen compute has nothing to keep: it stops.
    let second = relay.compute_pid().expect("second compute");
    let _cleanup2 = KillOnDrop(Some(second));
    assert!(Relay::wait_until(Duration::from_secs(60), || !pid_alive(
        second
    )));
}

fn ledger_lines(relay: &Relay) -> Vec<String> {
    std::fs::read_to_string(relay.dir.join("state/usage.ledger"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn billed_total(relay: &Relay) -> u64 {
    let (status, body) = relay.admin("GET", "/v1/usage");
    assert_eq!(status, 200, "{body}");
    body.split("\"billed_seconds\": ")
        .skip(1)
        .filter_map(|s| {
            s.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[test]
fn usage_bills_running_time_across_a_relay_restart() {
    let dir = TempDir::new("ctl-usage");
    let mut relay = Relay::start(dir.path(), RelayOptions::default());
    let mut measured = Duration::ZERO;
    for round in 0..2 {
        let t0 = Instant::now();
        let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1");
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        std::thread::sleep(Duration::from_millis(1_500));
        relay.pause();
        measured += t0.elapsed();
        if round == 0 {
            assert!(
                relay.stop().is_some_and(|s| s.success()),
                "relay exits 0 on SIGTERM"
            );
            relay = relay.restart();
        }
    }
    let billed = billed_total(&relay);
    let measured_s = measured.as_secs_f64();
    // Each round is rounded up to whole seconds within its hour: allow one second per round.
    assert!(
        (billed as f64 - measured_s).abs() <= 2.0,
        "billed {billed} s, measured {measured_s:.2} s\nledger:\n{}",
        ledger_lines(&relay).join("\n")
    );
    let lines = ledger_lines(&relay);
    let states: Vec<&str> = lines.iter().filter_map(|l| l.split(' ').nth(2)).collect();
    assert_eq!(
        states,
        [
            "resuming", "running", "pausing", "paused", "resuming", "running", "pausing", "paused"
        ],
        "nothing lost, nothing double counted"
    );
}

#[test]
fn a_killed_relay_restarted_adopts_the_running_compute() {
    let dir = TempDir::new("ctl-adopt");
    let mut relay = Relay::start(dir.path(), RelayOptions::default());
    let out = mariadb(
        relay.port,
        USER,
        Some(PASSWORD),
        &[],
        "CREATE DATABASE keep",
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let pid = relay.compute_pid().expect("compute pid");
    let _cleanup = KillOnDrop(Some(pid));
    relay.child.kill9();
    assert!(pid_alive(pid), "the compute outlives a killed relay");

    let relay = relay.restart();
    assert_eq!(relay.state(), "running", "adopted\n{}", relay.log());
    assert_eq!(relay.compute_pid(), Some(pid), "not restarted");
    let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SHOW DATABASES");
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("keep"));
    assert_eq!(relay.log_count("compute spawned"), 0, "{}", relay.log());
    assert_eq!(
        relay.metric("relay_wakes_total{instance=\"demo\",outcome=\"ok\"}"),
        0.0
    );
    // Stopping the new relay stops the adopted compute (on_relay_exit = "pause").
    let mut relay = relay;
    assert!(relay.stop().is_some_and(|s| s.success()));
    assert!(Relay::wait_until(Duration::from_secs(60), || !pid_alive(
        pid
    )));
}

/// A compute started by the process driver gets none of the relay's environment but what a
/// program needs to run (PATH, the locale, the log filter) and the instance's `env`: the
/// relay's store credentials never reach a compute that runs tenants' SQL.
#[test]
fn the_process_driver_gives_its_compute_a_cleared_environment() {
    let dir = TempDir::new("ctl-env");
    let d = dir.path().display().to_string();
    let shim = tests::bin_path("server-shim").display().to_string();
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            launcher: vec![
                "env".into(),
                "AWS_SECRET_ACCESS_KEY=relay-only-secret".into(),
                "PERCEPTRON_ADMIN_TOKEN=relay-only-token".into(),
            ],
            driver_toml: Some(format!(
                "[instance.driver]\nkind = \"process\"\n\
                 command = [\"{shim}\", \"run\", \"--listen\", \"127.0.0.1:{{COMPUTE_PORT}}\", \
                 \"--data\", \"{d}/data\", \"--key-file\", \"{d}/perceptron.key\"]\n\
                 env = {{ TENANT_SETTING = \"given\" }}\n"
            )),
            ..RelayOptions::default()
        },
    );
    let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1");
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let pid = relay.compute_pid().expect("compute pid");
    let _cleanup = KillOnDrop(Some(pid));
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let vars: Vec<String> = environ
        .split(|b| *b == 0)
        .filter(|v| !v.is_empty())
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect();
    assert!(vars.iter().any(|v| v == "TENANT_SETTING=given"), "{vars:?}");
    assert!(vars.iter().any(|v| v.starts_with("PATH=")), "{vars:?}");
    for v in &vars {
        let name = v.split('=').next().unwrap_or_default();
        assert!(
            [
                "PATH",
                "HOME",
                "LANG",
                "LANGUAGE",
                "TZ",
                "TMPDIR",
                "USER",
                "LOGNAME",
                "RUST_LOG",
                "RUST_BACKTRACE",
                "TENANT_SETTING"
            ]
            .contains(&name)
                || name.starts_with("LC_"),
            "the compute inherited {name}: {vars:?}"
        );
    }
}

/// `[instance.driver] user`: the compute runs as an unprivileged user of its own (Debian's
/// `nobody`), without the relay's supplementary groups, so tenants' SQL cannot read what the
/// relay can (its key file is root's, mode 0600). Before, the key `user` did not exist and the
/// compute ran as the relay's user.
#[test]
fn the_process_driver_runs_its_compute_as_its_own_user() {
    use std::os::unix::fs::{PermissionsExt as _, chown};
    fn chown_tree(path: &std::path::Path, id: u32) {
        chown(path, Some(id), Some(id)).unwrap();
        if path.is_dir() {
            for entry in std::fs::read_dir(path).unwrap() {
                chown_tree(&entry.unwrap().path(), id);
            }
        }
    }
    const NOBODY: u32 = 65534;
    let dir = TempDir::new("ctl-user");
    let d = dir.path().display().to_string();
    let shim = tests::bin_path("server-shim").display().to_string();
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            driver_toml: Some(format!(
                "[instance.driver]\nkind = \"process\"\nuser = \"nobody\"\n\
                 command = [\"{shim}\", \"run\", \"--listen\", \"127.0.0.1:{{COMPUTE_PORT}}\", \
                 \"--data\", \"{d}/data\", \"--key-file\", \"{d}/compute.key\"]\n"
            )),
            ..RelayOptions::default()
        },
    );
    // What the compute's user owns: its data and its own copy of the key.
    let key = dir.path().join("compute.key");
    std::fs::copy(dir.path().join("perceptron.key"), &key).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    chown_tree(&key, NOBODY);
    chown_tree(&dir.path().join("data"), NOBODY);
    let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1");
    assert_eq!(out.code, Some(0), "{}\n{}", out.stderr, relay.log());
    let pid = relay.compute_pid().expect("compute pid");
    let _cleanup = KillOnDrop(Some(pid));
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    assert_eq!(field("Uid:"), "65534 65534 65534 65534", "{status}");
    assert_eq!(field("Gid:"), "65534 65534 65534 65534", "{status}");
    assert_eq!(field("Groups:"), "", "{status}");
    // The relay's key is out of its reach.
    let relay_key = std::fs::metadata(dir.path().join("perceptron.key")).unwrap();
    assert_eq!(
        (
            std::os::unix::fs::MetadataExt::uid(&relay_key),
            relay_key.permissions().mode() & 0o777
        ),
        (0, 0o600)
    );
}

#[test]
fn exec_driver_starts_and_stops_a_shim_with_shell_commands() {
    let dir = TempDir::new("ctl-exec");
    let shim = bin_path("server-shim");
    let driver = format!(
        r#"[instance.driver]
kind = "exec"
start = ["sh", "-c", "'{shim}' run --listen 127.0.0.1:{{COMPUTE_PORT}} --data '{{DIR}}/data' --key-file '{{DIR}}/perceptron.key' > '{{DIR}}/exec-shim.log' 2>&1 & echo $! > '{{DIR}}/exec.pid'"]
stop = ["sh", "-c", "kill $(cat '{{DIR}}/exec.pid')"]
status = ["sh", "-c", "kill -0 $(cat '{{DIR}}/exec.pid')"]
command_timeout = "10s"
poll_interval = "500ms"
"#,
        shim = shim.display()
    );
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            driver_toml: Some(driver),
            ..RelayOptions::default()
        },
    );
    let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT USER()");
    assert_eq!(out.code, Some(0), "{}\n{}", out.stderr, relay.log());
    let pid: u32 = std::fs::read_to_string(dir.path().join("exec.pid"))
        .expect("pid")
        .trim()
        .parse()
        .expect("pid");
    let _cleanup = KillOnDrop(Some(pid));
    assert!(pid_alive(pid));
    relay.pause();
    assert!(
        Relay::wait_until(Duration::from_secs(60), || !pid_alive(pid)),
        "stop command ran"
    );
    // A compute killed behind the relay's back is noticed by the status command.
    let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1");
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let pid2: u32 = std::fs::read_to_string(dir.path().join("exec.pid"))
        .expect("pid")
        .trim()
        .parse()
        .expect("pid");
    let _cleanup2 = KillOnDrop(Some(pid2));
    let _ = Command::new("kill")
        .arg("-KILL")
        .arg(pid2.to_string())
        .status();
    assert!(
        Relay::wait_until(Duration::from_secs(60), || relay.state() == "failed"),
        "{}",
        relay.log()
    );
}

/// A `start` that forks a daemon and is still running when `resume_timeout` passes (the
/// defaults make this common: `command_timeout` 60s > `resume_timeout` 15s). Before, the
/// relay dropped it: the start command was killed, the daemon ran on, and `stop` never ran.
#[test]
fn an_exec_start_that_outlives_the_resume_timeout_is_followed_by_stop() {
    let dir = TempDir::new("ctl-exec-outlived");
    let driver = r#"[instance.driver]
kind = "exec"
start = ["sh", "-c", "sleep 120 & echo $! > '{DIR}/daemon.pid'; sleep 120"]
stop = ["sh", "-c", "kill $(cat '{DIR}/daemon.pid') && touch '{DIR}/stopped'"]
"#;
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            driver_toml: Some(driver.into()),
            resume_timeout: "1s",
            ..RelayOptions::default()
        },
    );
    let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1");
    assert_ne!(out.code, Some(0), "{}", out.stdout);
    assert!(out.stderr.contains("1053"), "{}", out.stderr);
    let pid: u32 = std::fs::read_to_string(dir.path().join("daemon.pid"))
        .expect("the start forked its daemon")
        .trim()
        .parse()
        .expect("pid");
    let _cleanup = KillOnDrop(Some(pid));
    assert!(
        Relay::wait_until(Duration::from_secs(30), || !pid_alive(pid)),
        "the daemon {pid} of the abandoned start still runs:\n{}",
        relay.log()
    );
    // The stop command kills the daemon first, then touches the file.
    let stopped = dir.path().join("stopped");
    assert!(
        Relay::wait_until(Duration::from_secs(30), || stopped.exists()),
        "{}",
        relay.log()
    );
    assert!(
        relay.log().contains("start given up; running stop"),
        "{}",
        relay.log()
    );
}

/// What the test control plane records and runs.
struct ControlPlane {
    port: u16,
    calls: Arc<Mutex<Vec<String>>>,
    child: Arc<Mutex<Option<std::process::Child>>>,
}

/// A minimal external control plane: POST /cp/start spawns a shim, /cp/stop kills it,
/// GET /cp/status reports it.
fn control_plane(dir: std::path::PathBuf, compute_port: Arc<Mutex<u16>>) -> ControlPlane {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let child: Arc<Mutex<Option<std::process::Child>>> = Arc::new(Mutex::new(None));
    let (calls2, child2) = (Arc::clone(&calls), Arc::clone(&child));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).unwrap_or(0);
            let req = String::from_utf8_lossy(&buf[..n]).into_owned();
            let line = req.lines().next().unwrap_or_default().to_owned();
            calls2.lock().expect("lock").push(line.clone());
            let mut c = child2.lock().expect("lock");
            let body = if line.starts_with("POST /cp/start") {
                let port = *compute_port.lock().expect("lock");
                *c = Command::new(bin_path("server-shim"))
                    .args(["run", "--listen", &format!("127.0.0.1:{port}"), "--data"])
                    .arg(dir.join("data"))
                    .arg("--key-file")
                    .arg(dir.join("perceptron.key"))
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .ok();
                "{}".to_owned()
            } else if line.starts_with("POST /cp/stop") {
                if let Some(mut ch) = c.take() {
                    let _ = ch.kill();
                    let _ = ch.wait();
                }
                "{}".to_owned()
            } else {
                let running = c
                    .as_mut()
                    .is_some_and(|ch| ch.try_wait().ok().flatten().is_none());
                format!("{{\"running\": {running}}}")
            };
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    ControlPlane { port, calls, child }
}

#[test]
fn http_driver_asks_an_external_control_plane() {
    let dir = TempDir::new("ctl-http");
    let compute_port = Arc::new(Mutex::new(0));
    let ControlPlane {
        port: cp_port,
        calls,
        child,
    } = control_plane(dir.path().to_owned(), Arc::clone(&compute_port));
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            driver_toml: Some(format!(
                "[instance.driver]\nkind = \"http\"\nurl = \"http://127.0.0.1:{cp_port}/cp\"\npoll_interval = \"500ms\"\n"
            )),
            ..RelayOptions::default()
        },
    );
    *compute_port.lock().expect("lock") = relay.compute_port;
    let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT USER()");
    assert_eq!(out.code, Some(0), "{}\n{}", out.stderr, relay.log());
    relay.pause();
    let seen = calls.lock().expect("lock").clone();
    assert!(
        seen.iter().any(|l| l.starts_with("POST /cp/start")),
        "{seen:?}"
    );
    assert!(
        seen.iter().any(|l| l.starts_with("POST /cp/stop")),
        "{seen:?}"
    );
    assert!(
        child.lock().expect("lock").is_none(),
        "the control plane stopped its compute"
    );
}

#[test]
fn metrics_parse_as_prometheus_text_and_status_shows_state_changes() {
    let dir = TempDir::new("ctl-metrics");
    let relay = Relay::start(dir.path(), RelayOptions::default());
    let status = |relay: &Relay| {
        let out = Command::new(bin_path("relay"))
            .args([
                "status",
                "--admin",
                &format!("127.0.0.1:{}", relay.admin_port),
            ])
            .output()
            .expect("relay status");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(
        status(&relay)
            .lines()
            .any(|l| l.starts_with("demo") && l.contains("paused")),
        "{}",
        status(&relay)
    );
    let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1");
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        status(&relay)
            .lines()
            .any(|l| l.starts_with("demo") && l.contains("running")),
        "{}",
        status(&relay)
    );

    let (code, body) = relay.admin("GET", "/metrics");
    assert_eq!(code, 200);
    let mut typed = std::collections::HashSet::new();
    let mut samples = 0;
    for line in body.lines() {
        if line.starts_with("# HELP ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split(' ');
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                panic!("bad TYPE line {line}");
            };
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            typed.insert(name.to_owned());
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("no value: {line}"));
        value
            .parse::<f64>()
            .unwrap_or_else(|_| panic!("bad value: {line}"));
        let name = series.split('{').next().unwrap_or_default();
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{line}"
        );
        let base = name
            .trim_end_matches("_bucket")
            .trim_end_matches("_sum")
            .trim_end_matches("_count");
        assert!(
            typed.contains(name) || typed.contains(base),
            "no TYPE before {line}"
        );
        if let Some(labels) = series.strip_prefix(name) {
            if !labels.is_empty() {
                assert!(labels.starts_with('{') && labels.ends_with('}'), "{line}");
                for pair in labels.trim_matches(|c| c == '{' || c == '}').split("\",") {
                    let (k, v) = pair
                        .split_once("=\"")
                        .unwrap_or_else(|| panic!("bad label in {line}"));
                    assert!(
                        !k.is_empty() && !v.contains('"') || v.ends_with('"'),
                        "{line}"
                    );
                }
            }
        }
        samples += 1;
    }
    assert!(samples > 10, "{body}");
    assert!(
        body.contains("relay_resume_seconds_count{instance=\"demo\"} 1"),
        "{body}"
    );
    assert!(
        body.contains("relay_instance_state{instance=\"demo\",state=\"running\"} 1"),
        "{body}"
    );
}
