//! Key rotation without a restart, end to end: the README's rotation steps
//! performed exactly (`relay keygen` on the computes' key file, then on the relays', `relay
//! status` to see the new signing key, `sed -i` to delete the old line from the relays' file,
//! then the computes'), while a client logs in through the perceptron route throughout. No
//! login may fail. A compute that keeps running across the rotation (exec driver whose
//! start and stop leave the test's server-shim alone) shows that server-shim reloads too.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tests::relay::{PASSWORD, Relay, RelayOptions, USER};
use tests::{Shim, TempDir, add_user, bin_path, raw};

/// How long each wait of the test may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(60);

fn relay_cli(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(bin_path("relay"))
        .args(args)
        .output()
        .expect("relay CLI");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn keygen(id: &str, files: &[&Path]) {
    let mut args = vec!["keygen".to_owned(), "--id".to_owned(), id.to_owned()];
    for f in files {
        args.push("--out".into());
        args.push(f.display().to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, out, err) = relay_cli(&args);
    assert!(ok, "keygen {id}: {out}{err}");
}

/// `grep '^ID ' FROM >> TO`, the README's way to copy a new key line to another key file.
fn copy_key_line(id: &str, from: &Path, to: &Path) {
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!("grep '^{id} ' \"$0\" >> \"$1\""))
        .arg(from)
        .arg(to)
        .status()
        .expect("sh");
    assert!(status.success());
}

/// `sed -i '/^ID /d' FILE`, the README's way to delete a key line.
fn delete_key_line(id: &str, file: &Path) {
    let status = Command::new("sed")
        .arg("-i")
        .arg(format!("/^{id} /d"))
        .arg(file)
        .status()
        .expect("sed");
    assert!(status.success());
    let mode = std::fs::metadata(file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "sed -i keeps the mode");
}

/// A relay in `dir` whose instance is a server-shim the test runs with its own key file
/// (`compute.key`): the exec driver's start and stop leave it alone, so it keeps running
/// while the relay pauses and wakes the instance, and every login is relayed to the same
/// process.
fn relay_and_long_running_shim(dir: &Path, key_id: &str) -> (Relay, Shim) {
    relay_and_shim_with_keys(dir, key_id, false)
}

/// As [`relay_and_long_running_shim`]; with `shared`, the shim reads the relay's own key file
/// (as in `examples/embedded.toml`) instead of `compute.key`.
fn relay_and_shim_with_keys(dir: &Path, key_id: &str, shared: bool) -> (Relay, Shim) {
    let relay_key = dir.join("perceptron.key");
    let compute_key = if shared {
        relay_key.clone()
    } else {
        dir.join("compute.key")
    };
    if shared {
        keygen(key_id, &[&relay_key]);
    } else {
        // The same key in both files, each created with mode 0600.
        keygen(key_id, &[&compute_key, &relay_key]);
    }
    add_user(&dir.join("data"), USER, PASSWORD, true);
    let shim = Shim::start(&dir.join("data"), Some(&compute_key), &[]);
    let driver = r#"[instance.driver]
kind = "exec"
start = ["true"]
stop = ["true"]
status = ["true"]
command_timeout = "10s"
poll_interval = "1s"
"#;
    let relay = Relay::start_with_compute(
        dir,
        RelayOptions {
            driver_toml: Some(driver.to_owned()),
            // Hundreds of wakes from one source: more than the default wake budget allows.
            relay_toml: "[relay.budgets]\nwakes_per_source = 0\nwakes_per_user = 0\n".into(),
            ..RelayOptions::default()
        },
        shim.port,
    );
    (relay, shim)
}

/// Logs in through the perceptron route again and again (pause, then a login that wakes the
/// instance, then a query), counting successes and recording every failure, until stopped.
struct ClientLoop {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicUsize>,
    failures: Arc<Mutex<Vec<String>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ClientLoop {
    fn start(port: u16, admin_port: u16) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicUsize::new(0));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let (stop2, ok2, failures2) = (Arc::clone(&stop), Arc::clone(&ok), Arc::clone(&failures));
        let thread = std::thread::spawn(move || {
            while !stop2.load(Ordering::SeqCst) {
                // Paused, so the next login is the perceptron's: a relayed, signed login.
                let paused = admin_post(admin_port, "/v1/instances/demo/pause?force=true");
                if !paused.contains("\"state\": \"paused\"")
                    && !paused.contains("instance is paused")
                {
                    failures2
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(format!("pause: {paused}"));
                    continue;
                }
                let outcome = match raw::login(port, USER, PASSWORD, None) {
                    Ok(Ok(mut s)) => match raw::query(&mut s, "SELECT 1") {
                        Ok(Ok(rows)) if rows == [Some("1".to_owned())] => Ok(()),
                        other => Err(format!("query: {other:?}")),
                    },
                    Ok(Err(err)) => Err(format!("login refused: {err:?}")),
                    Err(e) => Err(format!("login failed: {e}")),
                };
                match outcome {
                    Ok(()) => {
                        ok2.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) => failures2
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(e),
                }
            }
        });
        Self {
            stop,
            ok,
            failures,
            thread: Some(thread),
        }
    }

    /// Waits until `n` more logins succeeded than now.
    fn wait_for_logins(&self, n: usize, relay: &Relay, shim: &Shim) {
        let target = self.ok.load(Ordering::SeqCst) + n;
        assert!(
            Relay::wait_until(STEP_TIMEOUT, || self.ok.load(Ordering::SeqCst) >= target),
            "logins stalled after {} ok; first failures: {:?}\nshim log:\n{}",
            self.ok.load(Ordering::SeqCst),
            self.failures().get(..3),
            shim.log()
                .lines()
                .filter(|l| !l.contains("INFO"))
                .take(20)
                .collect::<Vec<_>>()
                .join("\n")
        );
        assert!(
            self.failures().is_empty(),
            "{:?}\n{}",
            self.failures().get(..3),
            relay.log()
        );
    }

    fn failures(&self) -> Vec<String> {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn finish(mut self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().expect("client loop");
        }
        (self.ok.load(Ordering::SeqCst), self.failures())
    }
}

impl Drop for ClientLoop {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// A POST to the admin API: the body (or the error).
fn admin_post(admin_port: u16, path: &str) -> String {
    use std::io::{Read as _, Write as _};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", admin_port)) else {
        return "admin API unreachable".into();
    };
    s.set_read_timeout(Some(tests::scaled(Duration::from_secs(30))))
        .ok();
    let _ = write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{admin_port}\r\nConnection: close\r\n\r\n"
    );
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    resp
}

/// `relay status --json`'s signing key and key ids.
fn signing_key(relay: &Relay) -> (String, Vec<String>) {
    let (ok, out, err) = relay_cli(&[
        "status",
        "--json",
        "--admin",
        &format!("127.0.0.1:{}", relay.admin_port),
    ]);
    assert!(ok, "{out}{err}");
    let field = |name: &str| {
        out.split(&format!("\"{name}\": "))
            .nth(1)
            .expect(name)
            .to_owned()
    };
    let signing = field("signing_key")
        .split('"')
        .nth(1)
        .expect("signing key")
        .to_owned();
    let ids = field("key_ids");
    let ids = ids.split(']').next().unwrap_or_default();
    let ids = ids
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    (signing, ids)
}

#[test]
fn the_documented_rotation_fails_no_login() {
    let dir = TempDir::new("rotation");
    let (relay, shim) = relay_and_long_running_shim(dir.path(), "2026-11");
    let (relay_key, compute_key) = (
        dir.path().join("perceptron.key"),
        dir.path().join("compute.key"),
    );
    assert_eq!(
        signing_key(&relay),
        ("2026-11".into(), vec!["2026-11".into()])
    );
    let (ok, out, _) = relay_cli(&[
        "status",
        "--admin",
        &format!("127.0.0.1:{}", relay.admin_port),
    ]);
    assert!(ok && out.contains("signing key 2026-11"), "{out}");

    let clients = ClientLoop::start(relay.port, relay.admin_port);
    clients.wait_for_logins(3, &relay, &shim);

    // 1. The new key goes to the computes' key file first.
    keygen("2026-12", &[&compute_key]);
    clients.wait_for_logins(3, &relay, &shim);
    // 2. Then the same line to the relays'; `relay status` shows when a relay signs with it.
    copy_key_line("2026-12", &compute_key, &relay_key);
    assert!(
        Relay::wait_until(STEP_TIMEOUT, || signing_key(&relay).0 == "2026-12"),
        "{}",
        relay.log()
    );
    clients.wait_for_logins(3, &relay, &shim);
    // 3. Once every relay signs with the new key, the old line goes: relays' file first.
    delete_key_line("2026-11", &relay_key);
    assert!(
        Relay::wait_until(STEP_TIMEOUT, || signing_key(&relay).1 == ["2026-12"]),
        "{}",
        relay.log()
    );
    clients.wait_for_logins(3, &relay, &shim);
    delete_key_line("2026-11", &compute_key);
    assert!(
        Relay::wait_until(STEP_TIMEOUT, || shim
            .log()
            .matches("key ring reloaded")
            .count()
            >= 2),
        "{}",
        shim.log()
    );
    clients.wait_for_logins(3, &relay, &shim);

    let (logins, failures) = clients.finish();
    assert!(failures.is_empty(), "{failures:?}\n{}", relay.log());
    assert!(logins >= 15, "{logins}");
    // Every login was relayed (one wake each) to the one shim, which verified its payload.
    let relayed = shim.log().matches("route=\"relayed\"").count();
    assert!(
        relayed >= logins,
        "{relayed} relayed of {logins}\n{}",
        shim.log()
    );
    assert_eq!(relay.log_count("key ring reloaded"), 2, "{}", relay.log());
    assert_eq!(relay.log_count("refused the changed key file"), 0);
    assert_eq!(
        relay.metric("relay_key_reloads_total{outcome=\"reloaded\"}"),
        2.0
    );
}

#[test]
fn an_invalid_key_file_is_refused_and_the_ring_in_use_stays() {
    let dir = TempDir::new("rotation-invalid");
    let (relay, _shim) = relay_and_long_running_shim(dir.path(), "k1");
    let relay_key = dir.path().join("perceptron.key");
    let good = std::fs::read(&relay_key).unwrap();
    // A truncated edit: the file changes but is no key ring.
    std::fs::write(&relay_key, b"k2 0123\n").unwrap();
    assert!(
        Relay::wait_until(STEP_TIMEOUT, || relay
            .log_count("refused the changed key file")
            == 1),
        "{}",
        relay.log()
    );
    assert!(
        relay.log().contains("line 1"),
        "names the bad line: {}",
        relay.log()
    );
    assert_eq!(signing_key(&relay), ("k1".into(), vec!["k1".into()]));
    // Relayed logins go on with the ring in use.
    let mut s = raw::login(relay.port, USER, PASSWORD, None)
        .unwrap()
        .unwrap_or_else(|e| panic!("{e:?}\n{}", relay.log()));
    assert_eq!(
        raw::query(&mut s, "SELECT 1").unwrap(),
        Ok(vec![Some("1".into())])
    );
    assert_eq!(
        relay.metric("relay_key_reloads_total{outcome=\"refused\"}"),
        1.0
    );
    // The file repaired, SIGHUP reads it at once (and the relay survives the signal).
    std::fs::write(&relay_key, &good).unwrap();
    let pid = relay.child.pid().unwrap().to_string();
    assert!(
        Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success()
    );
    assert!(
        Relay::wait_until(STEP_TIMEOUT, || relay.log_count("key ring reloaded") >= 1),
        "{}",
        relay.log()
    );
    assert_eq!(relay.log_count("SIGHUP received"), 1, "{}", relay.log());
    assert_eq!(relay.state(), "running");
}

/// One key file for the relay and its compute (the demo's layout): both notice the change
/// within a second, in either order. A relay that reads it first signs with a key id the shim
/// has not loaded yet, and the shim looks at its file again at once instead of refusing.
#[test]
fn a_key_file_shared_by_relay_and_compute_rotates_without_a_failed_login() {
    let dir = TempDir::new("rotation-shared");
    let (relay, shim) = relay_and_shim_with_keys(dir.path(), "old", true);
    let key = dir.path().join("perceptron.key");
    let clients = ClientLoop::start(relay.port, relay.admin_port);
    clients.wait_for_logins(3, &relay, &shim);
    for round in 0..3 {
        let new = format!("new-{round}");
        keygen(&new, &[&key]);
        // The relay reads it now; the shim only at its next look, up to a second later,
        // unless a login signed with the new key makes it look at once.
        let pid = relay.child.pid().unwrap().to_string();
        assert!(
            Command::new("kill")
                .args(["-HUP", &pid])
                .status()
                .unwrap()
                .success()
        );
        assert!(
            Relay::wait_until(STEP_TIMEOUT, || signing_key(&relay).0 == new),
            "{}",
            relay.log()
        );
        clients.wait_for_logins(3, &relay, &shim);
        let previous = if round == 0 {
            "old".to_owned()
        } else {
            format!("new-{}", round - 1)
        };
        delete_key_line(&previous, &key);
        assert!(
            Relay::wait_until(STEP_TIMEOUT, || signing_key(&relay).1 == [new.clone()]),
            "{}",
            relay.log()
        );
        clients.wait_for_logins(3, &relay, &shim);
    }
    let (logins, failures) = clients.finish();
    assert!(failures.is_empty(), "{failures:?}\n{}", shim.log());
    assert!(logins >= 18, "{logins}");
    assert_eq!(relay.log_count("refused the changed key file"), 0);
    assert!(relay.log_count("SIGHUP received") == 3, "{}", relay.log());
}
