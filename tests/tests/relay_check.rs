//! `relay check` and what `relay run` checks before it listens: every
//! problem of a configuration on a line of its own (a compute on the relay's own listener, a
//! missing driver program, a key file others can read, a state_dir that cannot be written),
//! exit status 1; and one relay per state_dir.

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
use std::time::Duration;

use tests::relay::{Relay, RelayOptions};
use tests::{TempDir, bin_path, free_port};

fn relay(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(bin_path("relay"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("relay");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn keygen(file: &Path) {
    let (code, out, err) = relay(&["keygen", "--id", "k1", "--out", &file.display().to_string()]);
    assert_eq!(code, Some(0), "{out}{err}");
}

/// A configuration in `dir` with one instance on `listen` whose compute is on `compute`,
/// run by `command`.
fn write_config(dir: &Path, state_dir: &str, listen: u16, compute: u16, command: &str) -> String {
    let path = dir.join("relay.toml");
    std::fs::write(
        &path,
        format!(
            r#"[relay]
state_dir = "{state_dir}"
key_file = "perceptron.key"
admin_listen = "127.0.0.1:{admin}"

[[instance]]
name = "demo"
listen = "127.0.0.1:{listen}"
compute = "127.0.0.1:{compute}"
[instance.driver]
kind = "process"
user = "nobody"
command = [{command}]
"#,
            admin = free_port(),
        ),
    )
    .unwrap();
    path.display().to_string()
}

#[test]
fn check_reports_every_problem_on_a_line_and_run_refuses_the_same() {
    let dir = TempDir::new("check-bad");
    let key = dir.path().join("perceptron.key");
    keygen(&key);
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    // A state_dir under a regular file cannot be created, even by root.
    std::fs::write(dir.path().join("not-a-dir"), "").unwrap();
    let port = free_port();
    let config = write_config(
        dir.path(),
        "not-a-dir/state",
        port,
        port,
        r#""server-shimm", "run""#,
    );
    let (code, out, err) = relay(&["check", "--config", &config]);
    assert_eq!(code, Some(1), "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    let line = |key: &str| {
        lines
            .iter()
            .find(|l| l.starts_with(&format!("{config}: {key}: ")))
            .unwrap_or_else(|| panic!("no line for {key}: {out}"))
            .to_string()
    };
    assert!(line("relay.key_file").contains("0644"), "{out}");
    assert!(
        line("relay.state_dir").contains("not a writable directory"),
        "{out}"
    );
    assert!(
        line("instance[0].compute").contains("is also instance[0].listen"),
        "{out}"
    );
    assert_eq!(
        line("instance[0].driver.command"),
        format!("{config}: instance[0].driver.command: server-shimm: not found on PATH")
    );
    // `run` checks the same before it listens: the same lines, and nothing listens.
    let (code, out, err) = relay(&["run", "--config", &config]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert_eq!(
        err.lines().filter(|l| l.starts_with("relay: ")).count(),
        4,
        "{err}"
    );
    assert!(err.contains("server-shimm: not found on PATH"), "{err}");
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
}

#[test]
fn check_accepts_a_good_configuration_and_names_a_parse_error() {
    let dir = TempDir::new("check-good");
    keygen(&dir.path().join("perceptron.key"));
    let shim = bin_path("server-shim").display().to_string();
    let config = write_config(
        dir.path(),
        "state",
        free_port(),
        free_port(),
        &format!("{shim:?}, \"run\""),
    );
    let (code, out, err) = relay(&["check", "--config", &config]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(out, format!("{config}: OK (1 instance)\n"));
    // A compute that would run as the relay's own user: a warning, not an error.
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("user = \"nobody\"\n", "")).unwrap();
    let (code, out, err) = relay(&["check", "--config", &config]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.starts_with(&format!(
            "{config}: instance[0].driver.user: warning: the compute runs as the relay's own user"
        )),
        "{out}"
    );
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace("kind = \"process\"", "kind = \"proces\""),
    )
    .unwrap();
    let (code, out, _) = relay(&["check", "--config", &config]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.starts_with(&format!("{config}: instance[0].driver.kind: ")),
        "{out}"
    );
}

#[test]
fn a_second_relay_on_the_same_state_dir_refuses_to_start_naming_the_first() {
    let dir = TempDir::new("check-lock");
    let first = Relay::start(dir.path(), RelayOptions::default());
    let pid = first.child.pid().unwrap();
    // Same state_dir, other ports: only the lock stands in the way.
    let text = std::fs::read_to_string(dir.path().join("relay.toml")).unwrap();
    let second = dir.path().join("second.toml");
    let text = text
        .replace(&first.port.to_string(), &free_port().to_string())
        .replace(&first.admin_port.to_string(), &free_port().to_string());
    std::fs::write(&second, text).unwrap();
    let mut cmd = Command::new(bin_path("relay"));
    cmd.args(["run", "--config"])
        .arg(&second)
        .env("NO_COLOR", "1");
    let out = tests::run_with_input(&mut cmd, b"", Duration::from_secs(60));
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr
            .contains(&format!("state directory in use: relay pid {pid} holds")),
        "{}",
        out.stderr
    );
    // The first relay is untouched.
    assert_eq!(first.state(), "paused");
    let lock = std::fs::read_to_string(dir.path().join("state/relay.lock")).unwrap();
    assert_eq!(lock.trim(), pid.to_string());
}
