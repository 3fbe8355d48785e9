//! Instances added, changed and removed while the relay runs (docs/instances.md): from files
//! in `relay.instances_dir` and through the admin API, with sessions held across a removal
//! (drained, or cut with `force`) and a change (the new definition starts once the old one
//! has drained).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::{Duration, Instant};

use tests::raw::{login, one_row, query};
use tests::relay::{PASSWORD, Relay, RelayOptions, USER};
use tests::{TempDir, add_user, bin_path, free_port, mariadb, ok, wait_for_greeting};

const TOKEN: &str = "instances-token-0123456789";

/// How long a step that the relay's scan (every 2 s) must notice may take.
const NOTICED: Duration = Duration::from_secs(30);

/// An instance file for a server-shim compute on `compute` with data in `<dir>/<name>-data`
/// (made with the test's user the first time), listening on `listen`.
fn instance_file(dir: &Path, name: &str, listen: u16, compute: u16) -> String {
    let data = dir.join(format!("{name}-data"));
    if !data.exists() {
        add_user(&data, USER, PASSWORD, true);
    }
    let command = [
        bin_path("server-shim").display().to_string(),
        "run".into(),
        "--listen".into(),
        format!("127.0.0.1:{compute}"),
        "--data".into(),
        data.display().to_string(),
        "--key-file".into(),
        dir.join("perceptron.key").display().to_string(),
    ]
    .iter()
    .map(|a| format!("{a:?}"))
    .collect::<Vec<_>>()
    .join(", ");
    format!(
        "listen = \"127.0.0.1:{listen}\"\ncompute = \"127.0.0.1:{compute}\"\n\
         idle_pause_after = \"1h\"\n\n[driver]\nkind = \"process\"\ncommand = [{command}]\n\
         stop_grace = \"5s\"\n"
    )
}

fn start(tmp: &TempDir) -> Relay {
    let dir = tmp.path();
    let token_file = dir.join("admin.token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::create_dir_all(dir.join("instances.d")).unwrap();
    Relay::start(
        dir,
        RelayOptions {
            relay_toml: "admin_token_file = \"admin.token\"\ninstances_dir = \"instances.d\"\n"
                .into(),
            idle_pause_after: "1h",
            ..RelayOptions::default()
        },
    )
}

fn authorised(relay: &Relay, method: &str, path: &str, body: &str) -> (u16, String) {
    relay.admin_request(
        method,
        path,
        &format!("Authorization: Bearer {TOKEN}\r\n"),
        body,
    )
}

/// `name=state` for each instance the admin API lists (live, then draining), with
/// `(draining N)` for a draining one.
fn instances(relay: &Relay) -> Vec<String> {
    let (code, body) = authorised(relay, "GET", "/v1/instances", "");
    assert_eq!(code, 200, "{body}");
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    list.as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let mut s = format!(
                "{}={}",
                i["name"].as_str().unwrap(),
                i["state"].as_str().unwrap()
            );
            if let Some(n) = i.get("draining").and_then(serde_json::Value::as_u64) {
                s.push_str(&format!(" (draining {n})"));
            }
            s
        })
        .collect()
}

fn wait_for(relay: &Relay, what: &str, mut cond: impl FnMut() -> bool) {
    assert!(
        Relay::wait_until(NOTICED, &mut cond),
        "{what} did not happen within {NOTICED:?}\nrelay log:\n{}",
        relay.log()
    );
}

fn listening(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

fn select_one(port: u16) -> String {
    ok(&mariadb(port, USER, Some(PASSWORD), &["-N"], "SELECT 1"))
        .trim()
        .to_owned()
}

fn ledger(relay: &Relay) -> String {
    std::fs::read_to_string(relay.dir.join("state/usage.ledger")).unwrap()
}

#[test]
fn an_instance_file_added_changed_and_removed_while_a_session_is_held() {
    let tmp = TempDir::new("relay-instances-file");
    let dir = tmp.path();
    let relay = start(&tmp);
    assert_eq!(instances(&relay), ["demo=paused"]);

    // Added: a new file is an instance, paused until a login wakes it.
    let (listen, compute) = (free_port(), free_port());
    let file = dir.join("instances.d/alpha.toml");
    std::fs::write(&file, instance_file(dir, "alpha", listen, compute)).unwrap();
    wait_for_greeting(listen, Instant::now(), NOTICED).unwrap();
    assert_eq!(instances(&relay), ["alpha=paused", "demo=paused"]);
    assert_eq!(select_one(listen), "1");
    assert_eq!(instances(&relay), ["alpha=running", "demo=paused"]);

    // Changed while a session is held: the old definition drains, the session goes on.
    let mut held = login(listen, USER, PASSWORD, None).unwrap().unwrap();
    let moved = free_port();
    std::fs::write(&file, instance_file(dir, "alpha", moved, compute)).unwrap();
    wait_for(&relay, "the old definition draining", || {
        instances(&relay) == ["demo=paused", "alpha=running (draining 1)"]
    });
    // Its listener closes as its accept loop ends, just after the drain began.
    wait_for(&relay, "the old listener closing", || !listening(listen));
    assert!(
        !listening(moved),
        "the new definition started before the old one drained"
    );
    assert_eq!(one_row(&mut held, "SELECT 41 + 1").as_deref(), Some("42"));
    drop(held);
    // Drained: the compute was stopped (the new definition starts paused).
    wait_for_greeting(moved, Instant::now(), NOTICED).unwrap();
    assert_eq!(instances(&relay), ["alpha=paused", "demo=paused"]);
    assert!(
        !listening(compute),
        "the old definition's compute still runs"
    );
    assert_eq!(select_one(moved), "1");

    // Removed while a session is held: no new login reaches it; the session goes on; when it
    // ends, the compute is stopped and its last ledger line written.
    let mut held = login(moved, USER, PASSWORD, None).unwrap().unwrap();
    std::fs::remove_file(&file).unwrap();
    wait_for(&relay, "the removal", || {
        instances(&relay) == ["demo=paused", "alpha=running (draining 1)"]
    });
    wait_for(&relay, "the removed instance's listener closing", || {
        !listening(moved)
    });
    assert_eq!(one_row(&mut held, "SELECT 6 * 7").as_deref(), Some("42"));
    drop(held);
    wait_for(&relay, "the drain", || instances(&relay) == ["demo=paused"]);
    assert!(
        !listening(compute),
        "the removed instance's compute still runs"
    );
    let last = ledger(&relay)
        .lines()
        .rfind(|l| l.contains(" alpha "))
        .unwrap()
        .to_owned();
    assert!(last.contains(" paused"), "alpha's last ledger line: {last}");
    assert!(relay.logged("instance drained and gone"));

    // A file the relay cannot use is said, and nothing starts.
    std::fs::write(dir.join("instances.d/broken.toml"), "listen = 5\n").unwrap();
    wait_for(&relay, "the problem reported", || {
        authorised(&relay, "GET", "/v1/instance-files", "")
            .1
            .contains("broken.toml: listen")
    });
    assert_eq!(instances(&relay), ["demo=paused"]);
}

#[test]
fn the_admin_api_adds_and_removes_instances_with_its_token() {
    let tmp = TempDir::new("relay-instances-api");
    let dir = tmp.path();
    let relay = start(&tmp);
    let (listen, compute) = (free_port(), free_port());
    let text = instance_file(dir, "beta", listen, compute);

    // Without the token: refused, nothing written.
    let (code, _) = relay.admin_request("PUT", "/v1/instances/beta", "", &text);
    assert_eq!(code, 401);
    // A file that does not check out: 400, naming the key; nothing written.
    let (code, body) = authorised(
        &relay,
        "PUT",
        "/v1/instances/beta",
        "compute = \"127.0.0.1:1\"\nidle_pause_after = \"soon\"\n",
    );
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("idle_pause_after"), "{body}");
    assert!(!dir.join("instances.d/beta.toml").exists());
    // A name that is no instance name (nor a safe file name): 400.
    let (code, body) = authorised(&relay, "PUT", "/v1/instances/..", &text);
    assert_eq!(code, 400, "{body}");
    // A listen address in use: 422, and the file taken back.
    let taken = text.replace(&format!(":{listen}\""), &format!(":{}\"", relay.port));
    let (code, body) = authorised(&relay, "PUT", "/v1/instances/beta", &taken);
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("cannot listen"), "{body}");
    assert!(!dir.join("instances.d/beta.toml").exists());

    // `relay instances put` sends a file the same way; a bad one is refused with the reason.
    std::fs::write(dir.join("bad.toml"), "compute = 5\n").unwrap();
    let out = std::process::Command::new(bin_path("relay"))
        .args(["instances", "put", "beta", "--file"])
        .arg(dir.join("bad.toml"))
        .arg("--config")
        .arg(dir.join("relay.toml"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("beta.toml: compute"), "{err}");

    // Added: 201 once it serves; the file is where the relay reads it after a restart.
    let (code, body) = authorised(&relay, "PUT", "/v1/instances/beta", &text);
    assert_eq!(code, 201, "{body}");
    let listed = authorised(&relay, "GET", "/v1/instances", "").1;
    assert!(listed.contains("instances.d/beta.toml"), "{listed}");
    assert_eq!(
        std::fs::read_to_string(dir.join("instances.d/beta.toml")).unwrap(),
        text
    );
    assert_eq!(select_one(listen), "1");

    // Changed with nothing open: the old definition drains at once and the new one starts
    // (201), or is about to (202); never refused.
    let changed = text.replace("idle_pause_after = \"1h\"", "idle_pause_after = \"2h\"");
    assert_ne!(changed, text);
    let (code, body) = authorised(&relay, "PUT", "/v1/instances/beta", &changed);
    assert!(code == 201 || code == 202, "{code} {body}");
    wait_for(&relay, "the changed definition serving", || {
        instances(&relay) == ["beta=paused", "demo=paused"]
    });
    assert_eq!(
        std::fs::read_to_string(dir.join("instances.d/beta.toml")).unwrap(),
        changed
    );
    assert_eq!(select_one(listen), "1");

    // Changed to a listen address in use, while a session is held: refused before anything
    // drains (422); the old definition and its session go on.
    let mut held = login(listen, USER, PASSWORD, None).unwrap().unwrap();
    let in_use = changed.replace(&format!(":{listen}\""), &format!(":{}\"", relay.port));
    let (code, body) = authorised(&relay, "PUT", "/v1/instances/beta", &in_use);
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("cannot listen"), "{body}");
    assert_eq!(instances(&relay), ["beta=running", "demo=paused"]);
    assert_eq!(one_row(&mut held, "SELECT 2 + 2").as_deref(), Some("4"));
    drop(held);
    assert_eq!(
        std::fs::read_to_string(dir.join("instances.d/beta.toml")).unwrap(),
        changed
    );

    // Removing takes the token too; a name that is no instance name never reaches the API.
    let (code, _) = relay.admin_request("DELETE", "/v1/instances/beta", "", "");
    assert_eq!(code, 401);
    let out = std::process::Command::new(bin_path("relay"))
        .args(["instances", "remove", "beta?force=true", "--config"])
        .arg(dir.join("relay.toml"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("instance name"), "{err}");

    // The configuration file's instance is not the API's to remove.
    let (code, body) = authorised(&relay, "DELETE", "/v1/instances/demo", "");
    assert_eq!(code, 409, "{body}");
    let (code, _) = authorised(&relay, "DELETE", "/v1/instances/nosuch", "");
    assert_eq!(code, 404);

    // Removed with force while a session is held: the session is cut at once.
    let mut held = login(listen, USER, PASSWORD, None).unwrap().unwrap();
    held.set_read_timeout(Some(tests::scaled(Duration::from_secs(30))))
        .unwrap();
    let (code, body) = authorised(&relay, "DELETE", "/v1/instances/beta?force=true", "");
    assert_eq!(code, 202, "{body}");
    let removal: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (removal["forced"].as_bool(), removal["open"].as_u64()),
        (Some(true), Some(1))
    );
    assert!(
        query(&mut held, "SELECT 1").is_err(),
        "the held session survived a forced removal"
    );
    assert!(!dir.join("instances.d/beta.toml").exists());
    wait_for(&relay, "the forced removal", || {
        instances(&relay) == ["demo=paused"]
    });
    assert!(
        !listening(compute),
        "the removed instance's compute still runs"
    );
}
