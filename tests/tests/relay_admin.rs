//! The admin API's hardening end to end: a usage request that used to bill
//! to the year 9999 and kill the relay, Host and Origin checks, the bearer token the CLI sends,
//! and the refusal to listen off loopback without a token.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::os::unix::fs::PermissionsExt as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tests::relay::{Relay, RelayOptions};
use tests::{ChildGuard, TempDir, bin_path, free_port};

/// The token the tests configure (at least 16 characters).
const TOKEN: &str = "test-admin-token-0123456789";

fn cli(args: &[&str]) -> (bool, String, String) {
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

/// The instance's state, asked with the bearer token.
fn state_with_token(relay: &Relay) -> String {
    let (status, body) = relay.admin_with(
        "GET",
        "/v1/instances",
        &format!("Authorization: Bearer {TOKEN}\r\n"),
    );
    assert_eq!(status, 200, "{body}");
    body.split("\"state\": \"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap_or("?")
        .to_owned()
}

#[test]
fn usage_to_the_year_9999_answers_at_once_and_the_relay_survives() {
    let dir = TempDir::new("admin-usage");
    let relay = Relay::start(dir.path(), RelayOptions::default());
    // A running instance is billed up to `to`: the case that billed hour by hour to 9999.
    let (status, body) = relay.admin("POST", "/v1/instances/demo/resume");
    assert_eq!(status, 200, "{body}");
    let started = Instant::now();
    let (status, body) = relay.admin("GET", "/v1/usage?to=9999-12-31");
    let took = started.elapsed();
    assert_eq!(status, 200, "{body}");
    assert!(body.len() < 4096, "{} bytes", body.len());
    // Billing hour by hour to 9999 took minutes; 10 s leaves room for a loaded machine.
    assert!(took < tests::scaled(Duration::from_secs(10)), "{took:?}");
    let (status, body) = relay.admin("GET", "/v1/usage?from=2100-01-01&to=2000-01-01");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("the range is reversed"), "{body}");
    // Still serving.
    assert_eq!(relay.state(), "running");
}

#[test]
fn refuses_rebound_hosts_and_cross_origin_posts() {
    let dir = TempDir::new("admin-origin");
    let relay = Relay::start(dir.path(), RelayOptions::default());
    let (status, body) = relay.admin_with("GET", "/v1/instances", "Host: evil.example:80\r\n");
    assert_eq!(status, 403, "{body}");
    // A form on another site POSTing through the operator's browser.
    let (status, body) = relay.admin_with(
        "POST",
        "/v1/instances/demo/resume",
        "Origin: http://evil.example\r\nContent-Type: application/x-www-form-urlencoded\r\n",
    );
    assert_eq!(status, 403, "{body}");
    assert_eq!(relay.state(), "paused", "the refused request woke nothing");
    assert_eq!(
        relay.metric("relay_admin_refused_total{reason=\"host\"}"),
        1.0
    );
    assert_eq!(
        relay.metric("relay_admin_refused_total{reason=\"origin\"}"),
        1.0
    );
}

#[test]
fn mutating_requests_need_the_token_which_the_cli_sends() {
    let dir = TempDir::new("admin-token");
    let token_file = dir.path().join("admin.token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            relay_toml: "admin_token_file = \"admin.token\"\n".into(),
            ..RelayOptions::default()
        },
    );
    let (status, _) = relay.admin("POST", "/v1/instances/demo/resume");
    assert_eq!(status, 401);
    let (status, _) = relay.admin_with(
        "POST",
        "/v1/instances/demo/resume",
        "Authorization: Bearer wrong-token-0123456789\r\n",
    );
    assert_eq!(status, 401);
    assert_eq!(state_with_token(&relay), "paused");

    let config = dir.path().join("relay.toml");
    let config = config.to_str().unwrap();
    let (ok, out, err) = cli(&["resume", "demo", "--config", config]);
    assert!(ok, "{out}{err}");
    assert_eq!(out, "demo: running\n");
    let (ok, out, err) = cli(&["pause", "demo", "--config", config]);
    assert!(ok, "{out}{err}");
    assert_eq!(out, "demo: paused\n");
    // Without the token file the CLI is refused.
    let admin = format!("127.0.0.1:{}", relay.admin_port);
    let (ok, _, err) = cli(&["resume", "demo", "--admin", &admin]);
    assert!(!ok);
    assert!(
        err.contains("missing or wrong bearer token (give --token-file"),
        "{err}"
    );
    assert!(!err.contains("HTTP"), "{err}");
    assert_eq!(state_with_token(&relay), "paused");
}

#[test]
fn refuses_to_start_off_loopback_without_a_token() {
    let dir = TempDir::new("admin-open");
    let config = dir.path().join("relay.toml");
    std::fs::write(
        &config,
        format!(
            "[relay]\nstate_dir = \"state\"\nkey_file = \"perceptron.key\"\nadmin_listen = \
             \"0.0.0.0:{}\"\n\n[[instance]]\nname = \"demo\"\nlisten = \"127.0.0.1:{}\"\ncompute \
             = \"127.0.0.1:{}\"\n[instance.driver]\nkind = \"process\"\ncommand = [\"true\"]\n",
            free_port(),
            free_port(),
            free_port()
        ),
    )
    .unwrap();
    let mut child = ChildGuard::new(
        Command::new(bin_path("relay"))
            .args(["run", "--config"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let status = child
        .wait_exit(Duration::from_secs(60))
        .expect("the relay refuses to start");
    assert!(!status.0.success());
    let err = status.1;
    assert!(
        err.contains(&format!(
            "{}: relay.admin_token_file: required because relay.admin_listen",
            config.display()
        )),
        "{err}"
    );
}
