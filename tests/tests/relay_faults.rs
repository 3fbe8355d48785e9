//! Faults: the compute exits during the relayed login, is killed in the
//! middle of a session, accepts TCP but never greets; the state directory is full or
//! read-only; the relay is killed -9 in the middle of a wake. Each test asserts what the
//! client saw, the instance's state and the ledger afterwards, and that the next login works.
//!
//! The misbehaving computes are a small Python program ([`FAKE_COMPUTE`]) started by the
//! relay's process driver like any compute, so the driver's own checks (the listener belongs
//! to its child) hold; a marker file makes the instance's next start the real server-shim.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::fs;
use std::io::{ErrorKind, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tests::relay::{KillOnDrop, PASSWORD, Relay, RelayOptions, USER, pid_alive};
use tests::{TempDir, Tmpfs, bin_path, mariadb, raw};

/// A compute that misbehaves on purpose. Arguments: port, mode, a file holding the framed
/// greeting in hex, a file to write its pid to. Modes:
/// - `die-on-login`: greets every connection; exits as soon as one sends it anything (the
///   relay's login), so it dies in the middle of the relayed login.
/// - `silent-after-first`: greets the first connection only (the driver's readiness probe,
///   whose connection the relay hands to the first login) and never says another word on
///   it; every later one is accepted and never hears a byte.
const FAKE_COMPUTE: &str = r#"
import os, socket, sys
port, mode, greeting_file, pid_file = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
greeting = bytes.fromhex(open(greeting_file).read())
with open(pid_file, "w") as f:
    f.write(str(os.getpid()))
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port))
s.listen(64)
print("fake compute listening", flush=True)
greeted, held = 0, []
while True:
    c, _ = s.accept()
    if mode == "silent-after-first" and greeted >= 1:
        held.append(c)
        continue
    c.sendall(greeting)
    greeted += 1
    if mode == "silent-after-first":
        held.append(c)
        continue
    if mode == "die-on-login":
        c.settimeout(5)
        try:
            data = c.recv(4096)
        except OSError:
            data = b""
        if data:
            os._exit(3)
    c.close()
"#;

/// The fake compute of `mode` on the instance's first start, the real server-shim on every
/// later one (the marker `real-next` is created by the first). The fake greets with the
/// greeting in `greeting.hex`, which the test writes before the first login.
fn fake_then_real(dir: &Path, mode: &str) -> Vec<String> {
    fs::write(dir.join("fake.py"), FAKE_COMPUTE).unwrap();
    let d = dir.display();
    let script = format!(
        "if [ -e '{d}/real-next' ]; then exec '{shim}' run --listen 127.0.0.1:{{COMPUTE_PORT}} \
         --data '{d}/data' --key-file '{d}/perceptron.key'; fi; touch '{d}/real-next'; \
         exec python3 '{d}/fake.py' {{COMPUTE_PORT}} {mode} '{d}/greeting.hex' '{d}/fake.pid'",
        shim = bin_path("server-shim").display()
    );
    vec!["sh".into(), "-c".into(), script]
}

/// Gives the fake compute a greeting: the relay's own (which imitates server-shim's profile,
/// so the relay finds nothing to relearn), framed, in hex.
fn write_fake_greeting(relay: &Relay) {
    let mut s = raw::connect(relay.port).unwrap();
    let (_, payload) = raw::read_packet(&mut s).unwrap();
    let mut framed = Vec::new();
    authplugin::packet::write_packet(&mut framed, 0, &payload);
    let hex: String = framed.iter().map(|b| format!("{b:02x}")).collect();
    fs::write(relay.dir.join("greeting.hex"), hex).unwrap();
}

fn fake_pid(dir: &Path) -> Option<u32> {
    fs::read_to_string(dir.join("fake.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn connections(relay: &Relay, outcome: &str) -> f64 {
    relay.metric(&format!(
        "relay_connections_total{{instance=\"demo\",outcome=\"{outcome}\"}}"
    ))
}

/// The ledger's intact records for `demo`, oldest first, and how many lines were not
/// records (torn or garbled).
fn ledger_states(state_dir: &Path) -> (Vec<String>, usize) {
    let text = fs::read_to_string(state_dir.join("usage.ledger")).unwrap_or_default();
    let mut states = Vec::new();
    let mut garbled = 0;
    for line in text.split_inclusive('\n') {
        let fields: Vec<&str> = line.trim_end_matches('\n').split(' ').collect();
        // `<ms> <instance> <state> [<rate in milli-CCU>]`: the rate is absent in older ledgers.
        let intact = line.ends_with('\n')
            && (fields.len() == 3 || fields.len() == 4 && fields[3].parse::<u64>().is_ok())
            && fields[0].parse::<u64>().is_ok()
            && [
                "paused", "resuming", "running", "frozen", "pausing", "failed",
            ]
            .contains(&fields[2]);
        if !intact {
            garbled += 1;
        } else if fields[1] == "demo" {
            states.push(fields[2].to_owned());
        }
    }
    (states, garbled)
}

fn select_1(relay: &Relay) {
    let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1");
    assert_eq!(out.code, Some(0), "{}\nlog:\n{}", out.stderr, relay.log());
    assert_eq!(out.stdout, "1\n");
}

/// The compute greets, takes the relayed login and exits: the client gets ERR 1053 (08S01,
/// "retry"), the instance is marked failed, and the next login starts a compute again.
#[test]
fn a_compute_exiting_during_the_relayed_login_gives_1053_and_the_next_login_works() {
    let dir = TempDir::new("faults-exit-mid-login");
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            command: Some(fake_then_real(dir.path(), "die-on-login")),
            ..RelayOptions::default()
        },
    );
    write_fake_greeting(&relay);
    let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1");
    let _fake = KillOnDrop(fake_pid(dir.path()));
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    assert!(
        out.stderr
            .contains("ERROR 1053 (08S01): Instance 'demo' failed during login. Retry"),
        "{}\nlog:\n{}",
        out.stderr,
        relay.log()
    );
    assert_eq!(connections(&relay, "compute_lost"), 1.0);
    assert!(
        Relay::wait_until(Duration::from_secs(60), || relay.state() == "failed"),
        "state {}\n{}",
        relay.state(),
        relay.log()
    );
    assert!(!pid_alive(fake_pid(dir.path()).unwrap()));
    // The relay survived, and the next login wakes the (now real) compute.
    select_1(&relay);
    assert_eq!(relay.state(), "running");
}

/// A session held by the perceptron (the connection that woke the instance) whose compute is
/// killed -9: the client's next read ends at once (EOF or reset, not its read timeout), and
/// the instance is marked failed, which closes the billed interval.
#[test]
fn a_compute_killed_mid_session_ends_the_session_and_marks_the_instance_failed() {
    let dir = TempDir::new("faults-kill-compute");
    let relay = Relay::start(dir.path(), RelayOptions::default());
    let mut session = raw::login(relay.port, USER, PASSWORD, None)
        .unwrap()
        .unwrap();
    assert_eq!(
        raw::query(&mut session, "SELECT 1").unwrap(),
        Ok(vec![Some("1".into())])
    );
    assert_eq!(
        connections(&relay, "relayed"),
        1.0,
        "held by the perceptron"
    );
    let pid = relay.compute_pid().expect("compute pid");
    let _cleanup = KillOnDrop(Some(pid));
    session
        .set_read_timeout(Some(tests::scaled(Duration::from_secs(30))))
        .unwrap();
    let killed = Instant::now();
    let status = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut buf = [0u8; 64];
    let read = session.read(&mut buf);
    let took = killed.elapsed();
    match read {
        Ok(0) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        other => panic!("expected EOF or a reset, got {other:?} after {took:?}"),
    }
    assert!(took < tests::scaled(Duration::from_secs(30)), "{took:?}");
    eprintln!("client saw the end of its session {took:?} after the kill");
    assert!(
        Relay::wait_until(Duration::from_secs(60), || relay.state() == "failed"),
        "state {}\n{}",
        relay.state(),
        relay.log()
    );
    let (states, garbled) = ledger_states(&relay.dir.join("state"));
    assert_eq!(garbled, 0);
    assert_eq!(states, ["resuming", "running", "failed"], "billing stopped");
    // The next login starts a new compute.
    select_1(&relay);
    assert_ne!(relay.compute_pid(), Some(pid));
}

/// A compute that greets its readiness probe and then says nothing more, on that connection
/// (which carries the first login) or any other:
/// the client gets ERR 1053 once `compute_timeout` has passed (no hang), the relay stops the
/// mute compute and marks the instance failed (it would otherwise hold every later client,
/// which takes the direct route to it, until the idle pause), and the next login works.
#[test]
fn a_compute_that_accepts_but_never_greets_gives_1053_after_compute_timeout_and_is_stopped() {
    let dir = TempDir::new("faults-mute");
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            command: Some(fake_then_real(dir.path(), "silent-after-first")),
            compute_timeout: "2s",
            ..RelayOptions::default()
        },
    );
    write_fake_greeting(&relay);
    let started = Instant::now();
    let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1");
    let took = started.elapsed();
    let fake = fake_pid(dir.path()).expect("the fake compute ran");
    let _fake = KillOnDrop(Some(fake));
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    assert!(
        out.stderr
            .contains("ERROR 1053 (08S01): Instance 'demo' failed during login. Retry"),
        "{}\nlog:\n{}",
        out.stderr,
        relay.log()
    );
    assert!(took >= Duration::from_millis(1_900), "{took:?}");
    assert!(took < tests::scaled(Duration::from_secs(20)), "{took:?}");
    assert_eq!(connections(&relay, "compute_timeout"), 1.0);
    assert!(
        Relay::wait_until(Duration::from_secs(60), || !pid_alive(fake)),
        "the mute compute {fake} still runs; state {}\n{}",
        relay.state(),
        relay.log()
    );
    // The compute's process ends before the relay has marked the instance (it passes
    // through `pausing` as it stops the compute).
    assert!(
        Relay::wait_until(Duration::from_secs(60), || relay.state() == "failed"),
        "state {}\n{}",
        relay.state(),
        relay.log()
    );
    select_1(&relay);
}

/// Fills the file system holding `dir` with `dir/filler` until a write fails.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut f = fs::File::create(&path).unwrap();
    let chunk = [0u8; 4096];
    while f.write_all(&chunk).is_ok() {}
    path
}

/// The state directory fills up while the instance wakes: the login still succeeds (billing
/// must not stop the service) and the refused ledger records are logged loudly. The record
/// that hit the full disk half-way is not left torn in the file, so the records written once
/// space is back stay readable, and the records refused meanwhile are written then, in
/// order, with their own times: nothing committed is lost, nothing is billed twice.
#[test]
fn a_full_state_dir_neither_stops_logins_nor_corrupts_the_ledger() {
    let dir = TempDir::new("faults-full");
    let state = dir.path().join("state");
    let Some(_tmpfs) = Tmpfs::mount(&state, "64k") else {
        return;
    };
    let relay = Relay::start(dir.path(), RelayOptions::default());
    // Records of another instance fill the ledger's page but for 10 bytes, so the wake's
    // first record is torn by the full disk half-way, as it would be on a real one.
    let ledger = state.join("usage.ledger");
    let len = fs::metadata(&ledger).unwrap().len() as usize;
    let line = "1 other paused\n";
    let room = 4096 - 10 - len;
    let mut padding = format!("1{} other paused\n", "0".repeat(room % line.len()));
    padding.push_str(&line.repeat(room / line.len() - 1));
    assert_eq!(padding.len(), room);
    fs::OpenOptions::new()
        .append(true)
        .open(&ledger)
        .unwrap()
        .write_all(padding.as_bytes())
        .unwrap();
    let filler = fill(&state);

    select_1(&relay);
    assert_eq!(relay.state(), "running");
    assert!(
        relay.log_count("cannot append to the usage ledger") >= 1,
        "{}",
        relay.log()
    );
    // Space is back; the pause's records go through, and take the refused ones with them.
    fs::remove_file(filler).unwrap();
    relay.pause();
    let (states, garbled) = ledger_states(&state);
    assert_eq!(
        garbled,
        0,
        "ledger:\n{}",
        fs::read_to_string(&ledger).unwrap()
    );
    assert_eq!(
        states,
        ["resuming", "running", "pausing", "paused"],
        "ledger:\n{}",
        fs::read_to_string(&ledger).unwrap()
    );
    let (status, usage) = relay.admin("GET", "/v1/usage");
    assert_eq!(status, 200, "{usage}");
    assert!(usage.contains("\"billed_seconds\": "), "{usage}");
    drop(relay);
}

/// A state directory that cannot be written (here a read-only mount) stops the relay at
/// start with a message naming the directory, instead of running without a ledger.
#[test]
fn a_read_only_state_dir_stops_the_relay_at_start_naming_the_directory() {
    let dir = TempDir::new("faults-ro");
    let state = dir.path().join("state");
    let Some(tmpfs) = Tmpfs::mount(&state, "64k") else {
        return;
    };
    let mut relay = Relay::start(dir.path(), RelayOptions::default());
    assert!(relay.stop().is_some_and(|s| s.success()));
    tmpfs.remount("ro");
    let mut cmd = Command::new(bin_path("relay"));
    cmd.args(["run", "--config"])
        .arg(dir.path().join("relay.toml"))
        .env("NO_COLOR", "1");
    let out = tests::run_with_input(&mut cmd, b"", Duration::from_secs(60));
    assert!(
        out.code.is_some_and(|c| c != 0),
        "the relay must refuse to start (exit {:?}): {}",
        out.code,
        out.stderr
    );
    let last = out.stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains(&state.display().to_string()) && last.contains("Read-only"),
        "{}",
        out.stderr
    );
    drop(relay);
    tmpfs.remount("rw");
}

/// The Python interpreter itself, not a launcher that execs it (pyenv's `python3` is a shell
/// script): the compute's pid file then names the process that sleeps, until it execs
/// server-shim.
fn real_python() -> String {
    let out = Command::new("python3")
        .args([
            "-c",
            "import os, sys; print(os.path.realpath(sys.executable))",
        ])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Runs a wake whose compute takes 2 s to start (a wrapper that sleeps, then execs
/// server-shim), kills the relay -9 in the middle of it and restarts it on the same state
/// directory, either at once (the wrapper still sleeps) or once the orphan compute greets.
/// Afterwards no compute runs unaccounted for (it was stopped, or adopted and shown running
/// with its pid), the ledger has no billed interval open for a compute that is gone, and a
/// new login works.
fn relay_killed_during_a_wake(label: &str, restart_once_the_orphan_greets: bool) {
    let dir = TempDir::new(label);
    let d = dir.path().display();
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            command: Some(vec![
                real_python(),
                "-c".into(),
                "import os, sys, time; time.sleep(2); os.execv(sys.argv[1], sys.argv[1:])".into(),
                bin_path("server-shim").display().to_string(),
                "run".into(),
                "--listen".into(),
                "127.0.0.1:{COMPUTE_PORT}".into(),
                "--data".into(),
                format!("{d}/data"),
                "--key-file".into(),
                format!("{d}/perceptron.key"),
            ]),
            ..RelayOptions::default()
        },
    );
    let port = relay.port;
    let client = std::thread::spawn(move || mariadb(port, USER, Some(PASSWORD), &[], "SELECT 1"));
    assert!(Relay::wait_until(Duration::from_secs(60), || relay
        .compute_pid()
        .is_some()));
    let orphan = relay.compute_pid().unwrap();
    let _cleanup = KillOnDrop(Some(orphan));
    assert_eq!(relay.state(), "resuming");
    let mut relay = relay;
    relay.child.kill9();
    let out = client.join().unwrap();
    assert_ne!(out.code, Some(0), "{}", out.stdout);
    if restart_once_the_orphan_greets {
        assert!(
            Relay::wait_until(Duration::from_secs(60), || relay.compute_listening()),
            "the orphan never listened"
        );
    }

    let restarted = relay.restart();
    let settled = Relay::wait_until(Duration::from_secs(60), || {
        !pid_alive(orphan)
            || (restarted.state() == "running" && restarted.compute_pid() == Some(orphan))
    });
    assert!(
        settled,
        "compute {orphan} runs unaccounted for (state {}, pid file {:?})\nlog:\n{}",
        restarted.state(),
        restarted.compute_pid(),
        restarted.log()
    );
    if !pid_alive(orphan) {
        let why = if restart_once_the_orphan_greets {
            "now runs another program; stopping it"
        } else {
            // Still asleep in the wrapper, as a rule; on a slow machine it may have exec'd.
            "stopping it instead of adopting it"
        };
        assert_eq!(
            restarted.log_count(why),
            1,
            "stopped by the relay, not by chance:\n{}",
            restarted.log()
        );
    }
    let (states, garbled) = ledger_states(&dir.path().join("state"));
    assert_eq!(garbled, 0);
    let last = states.last().map(String::as_str);
    if pid_alive(orphan) {
        assert_eq!(last, Some("resuming"), "adopted: the interval continues");
    } else {
        assert!(
            matches!(last, Some("paused" | "failed")),
            "nothing runs, yet the ledger bills: {states:?}"
        );
        assert_ne!(restarted.state(), "running");
    }
    select_1(&restarted);
    eprintln!("{label}: ledger {states:?}");
}

#[test]
fn a_relay_killed_during_a_wake_leaves_no_orphan_when_restarted_at_once() {
    relay_killed_during_a_wake("faults-kill-relay-early", false);
}

#[test]
fn a_relay_killed_during_a_wake_leaves_no_orphan_when_restarted_after_the_compute_started() {
    relay_killed_during_a_wake("faults-kill-relay-late", true);
}
