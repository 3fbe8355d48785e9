//! The CLI for scripts and people: idempotent `pause`/`resume`, errors in
//! words rather than HTTP status codes, `status --json` and `--watch`, `usage --json`, `usage`
//! from the ledger file when no relay runs, refused ranges; `server-shim user passwd` and
//! `user list` on a missing data directory.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use tests::relay::{PASSWORD, Relay, RelayOptions, USER};
use tests::{ChildGuard, Output, Shim, TempDir, bin_path, raw, run_with_input};

fn relay_cli(args: &[&str]) -> Output {
    let mut cmd = Command::new(bin_path("relay"));
    cmd.args(args);
    run_with_input(&mut cmd, b"", Duration::from_secs(60))
}

fn shim_cli(args: &[&str], stdin: &[u8]) -> Output {
    let mut cmd = Command::new(bin_path("server-shim"));
    cmd.args(args);
    run_with_input(&mut cmd, stdin, Duration::from_secs(60))
}

#[test]
fn pause_and_resume_are_idempotent_and_errors_speak_plainly() {
    let dir = TempDir::new("cli-verbs");
    // Without parking, so that an open session refuses an unforced pause.
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            instance_toml: "park = false\n".into(),
            ..RelayOptions::default()
        },
    );
    let admin = format!("127.0.0.1:{}", relay.admin_port);
    let verb = |v: &str, name: &str| relay_cli(&[v, name, "--admin", &admin]);

    let out = verb("pause", "demo");
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(out.stdout, "demo: already paused\n");
    let out = verb("resume", "demo");
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (Some(0), "demo: running\n"),
        "{}",
        out.stderr
    );
    let out = verb("resume", "demo");
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (Some(0), "demo: already running\n")
    );

    // A session open: an unforced pause is refused, in words.
    let session = raw::login(relay.port, USER, PASSWORD, None)
        .unwrap()
        .unwrap();
    let out = verb("pause", "demo");
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    assert_eq!(
        out.stderr,
        "relay: 1 connection(s) open; pause with force to cut them\n"
    );
    drop(session);
    assert!(Relay::wait_until(Duration::from_secs(60), || verb(
        "pause", "demo"
    )
    .code
        == Some(0)));
    assert_eq!(relay.state(), "paused");

    let out = verb("pause", "nope");
    assert_eq!(out.code, Some(1));
    assert_eq!(out.stderr, "relay: no instance named 'nope'\n");
    assert!(!out.stderr.contains("HTTP"));
}

#[test]
fn status_prints_json_and_watches() {
    let dir = TempDir::new("cli-status");
    let relay = Relay::start(dir.path(), RelayOptions::default());
    let admin = format!("127.0.0.1:{}", relay.admin_port);
    let out = relay_cli(&["status", "--json", "--admin", &admin]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("\"relay\": {"), "{}", out.stdout);
    assert!(
        out.stdout.contains("\"signing_key\": \"test-1\""),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("\"name\": \"demo\""), "{}", out.stdout);
    assert!(
        out.stdout.contains("\"state\": \"paused\""),
        "{}",
        out.stdout
    );
    let out = relay_cli(&["status", "--admin", &admin]);
    assert!(out.stdout.starts_with("relay pid "), "{}", out.stdout);
    assert!(
        out.stdout.contains("signing key test-1 (key ring: test-1)"),
        "{}",
        out.stdout
    );

    // --watch prints a report every second until stopped; the second one shows the resume.
    let mut watch = Command::new(bin_path("relay"));
    watch
        .args(["status", "--watch", "1", "--admin", &admin])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = watch.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut guard = ChildGuard::new(child);
    let mut lines = BufReader::new(stdout).lines();
    let mut reports = 0;
    let mut saw_running = false;
    let (status, body) = relay.admin("POST", "/v1/instances/demo/resume");
    assert_eq!(status, 200, "{body}");
    while let Some(Ok(line)) = lines.next() {
        if line.starts_with("relay pid ") {
            reports += 1;
        }
        if line.starts_with("demo ") && line.contains("running") {
            saw_running = true;
        }
        if reports >= 2 && saw_running {
            break;
        }
    }
    assert!(reports >= 2 && saw_running, "{reports} reports");
    guard.kill9();
}

#[test]
fn usage_reads_the_ledger_without_a_relay_and_refuses_bad_ranges() {
    let dir = TempDir::new("cli-usage");
    let mut relay = Relay::start(dir.path(), RelayOptions::default());
    let (status, body) = relay.admin("POST", "/v1/instances/demo/resume");
    assert_eq!(status, 200, "{body}");
    relay.pause();
    let config = dir.path().join("relay.toml").display().to_string();
    let live = relay_cli(&["usage", "--config", &config, "--json"]);
    assert_eq!(live.code, Some(0), "{}", live.stderr);
    assert!(
        live.stdout.contains("\"billed_seconds\""),
        "{}",
        live.stdout
    );
    assert!(relay.stop().is_some_and(|s| s.success()));

    // No relay runs: the same report from the ledger file.
    let offline = relay_cli(&["usage", "--config", &config, "--json"]);
    assert_eq!(offline.code, Some(0), "{}", offline.stderr);
    assert_eq!(offline.stdout, live.stdout);
    let table = relay_cli(&["usage", "--config", &config]);
    assert_eq!(table.code, Some(0), "{}", table.stderr);
    assert!(
        table.stdout.lines().any(|l| l.starts_with("total ")),
        "{}",
        table.stdout
    );

    let out = relay_cli(&[
        "usage",
        "--config",
        &config,
        "--from",
        "2026-12-01",
        "--to",
        "2026-11-01",
    ]);
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    assert!(
        out.stderr.contains("the range is reversed"),
        "{}",
        out.stderr
    );
    let out = relay_cli(&["usage", "--config", &config, "--from", "yesterday"]);
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    assert!(out.stderr.starts_with("relay: --from: "), "{}", out.stderr);
    // Without --config there is no ledger to fall back on: the unreachable relay is the error.
    let out = relay_cli(&[
        "usage",
        "--admin",
        &format!("127.0.0.1:{}", relay.admin_port),
    ]);
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("cannot reach the relay's admin API"),
        "{}",
        out.stderr
    );
}

#[test]
fn shim_user_passwd_changes_the_password_and_list_needs_the_directory() {
    let dir = TempDir::new("cli-shim");
    let data = dir.path().join("data");
    let data_arg = data.display().to_string();
    let out = shim_cli(
        &[
            "user",
            "add",
            "app",
            "--password-stdin",
            "--data",
            &data_arg,
        ],
        b"old-password\n",
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let out = shim_cli(
        &[
            "user",
            "passwd",
            "app",
            "--password-stdin",
            "--data",
            &data_arg,
        ],
        b"new-password\n",
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(out.stderr, "server-shim: password of 'app' changed\n");
    let out = shim_cli(
        &[
            "user",
            "passwd",
            "nobody",
            "--password-stdin",
            "--data",
            &data_arg,
        ],
        b"x\n",
    );
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("nobody"), "{}", out.stderr);

    let shim = Shim::start(&data, None, &[]);
    let refused = raw::login(shim.port, "app", "old-password", None).unwrap();
    assert_eq!(refused.err().map(|e| e.0), Some(1045));
    let mut s = raw::login(shim.port, "app", "new-password", None)
        .unwrap()
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(
        raw::query(&mut s, "SELECT 1").unwrap(),
        Ok(vec![Some("1".into())])
    );

    let out = shim_cli(&["user", "list", "--data", &data_arg], b"");
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.starts_with("app\tuser\t"), "{}", out.stdout);
    let missing = dir.path().join("no-such-dir").display().to_string();
    let out = shim_cli(&["user", "list", "--data", &missing], b"");
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    assert!(
        out.stderr.contains(&missing) && out.stderr.contains("No such file"),
        "{}",
        out.stderr
    );
    assert!(!std::path::Path::new(&missing).exists(), "not created");
}
