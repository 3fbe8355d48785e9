//! Packaging: every metric the Grafana dashboard and the Prometheus alerting
//! rules in `packaging/monitoring/` use is one a running relay serves on `/metrics` (from its
//! first scrape, with `# HELP` text), and both files parse; the systemd unit verifies (with
//! each drop-in) and its exposure stays low; shell completions and man pages come out of the
//! relay's own clap definitions.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use tests::TempDir;
use tests::relay::{Relay, RelayOptions};

fn packaging(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../packaging/monitoring")
        .join(file)
}

fn systemd_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../packaging/systemd")
}

/// The unit as installed, with the relay at the path this build has, plus `drop_in` (a file
/// under `perceptron-relay.service.d/`), in a directory of its own.
fn installed_unit(dir: &std::path::Path, drop_in: Option<&str>) -> PathBuf {
    let unit = std::fs::read_to_string(systemd_dir().join("perceptron-relay.service"))
        .unwrap()
        .replace(
            "/usr/local/bin/relay",
            &tests::bin_path("relay").display().to_string(),
        );
    let path = dir.join("perceptron-relay.service");
    std::fs::write(&path, unit).unwrap();
    if let Some(name) = drop_in {
        let d = dir.join("perceptron-relay.service.d");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::copy(
            systemd_dir().join("perceptron-relay.service.d").join(name),
            d.join(name.trim_end_matches(".example")),
        )
        .unwrap();
    }
    path
}

fn systemd_analyze(args: &[&str], unit: &std::path::Path) -> (bool, String) {
    let out = Command::new("systemd-analyze")
        .args(args)
        .arg(unit)
        .output()
        .expect("systemd-analyze");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn the_systemd_unit_verifies_and_is_hardened() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("systemd-analyze is not installed; skipped");
        return;
    }
    for drop_in in [
        None,
        Some("nftables.conf.example"),
        Some("capacity.conf.example"),
        Some("kernel-splice.conf.example"),
    ] {
        let dir = TempDir::new("systemd");
        let unit = installed_unit(dir.path(), drop_in);
        let (ok, out) = systemd_analyze(&["verify"], &unit);
        assert!(ok && out.trim().is_empty(), "{drop_in:?}: {out}");
    }
    // The shipped unit: no capability, and systemd's own exposure score stays "OK" (< 2).
    let dir = TempDir::new("systemd-security");
    let unit = installed_unit(dir.path(), None);
    let (_, out) = systemd_analyze(&["security", "--offline=true"], &unit);
    let score: f64 = out
        .split("Overall exposure level for perceptron-relay.service: ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!(score < 2.0, "exposure {score}:\n{out}");
    // The unit runs the commands it names.
    let text = std::fs::read_to_string(systemd_dir().join("perceptron-relay.service")).unwrap();
    assert!(text.contains("ExecStartPre=/usr/local/bin/relay check --config "));
    assert!(text.contains("ExecReload=/bin/kill -HUP $MAINPID"));
}

#[test]
fn completions_and_man_pages_come_from_the_cli_definitions() {
    let relay = tests::bin_path("relay");
    for (shell, marker) in [
        ("bash", "_relay()"),
        ("zsh", "#compdef relay"),
        ("fish", "complete -c relay"),
    ] {
        let out = Command::new(&relay)
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(script.contains(marker), "{shell}: {script}");
        for sub in ["check", "status", "keygen", "usage"] {
            assert!(script.contains(sub), "{shell} lacks {sub}");
        }
    }
    // bash accepts the script.
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source <({} completions bash) && complete -p relay",
            relay.display()
        ))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let dir = TempDir::new("man");
    let out = Command::new(&relay)
        .args(["man", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for page in [
        "relay.1",
        "relay-run.1",
        "relay-check.1",
        "relay-status.1",
        "relay-keygen.1",
    ] {
        let text = std::fs::read_to_string(dir.path().join(page)).unwrap();
        assert!(
            text.starts_with(".ie") || text.contains(".TH"),
            "{page}: {text}"
        );
    }
    let status = std::fs::read_to_string(dir.path().join("relay-status.1")).unwrap();
    assert!(
        status.contains("watch") && status.contains("json"),
        "{status}"
    );
    let out = Command::new(&relay).arg("man").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains(".TH relay 1"));

    let shim = tests::bin_path("server-shim");
    let out = Command::new(&shim)
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("passwd"));
    let out = Command::new(&shim).arg("man").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains(".TH server-shim 1"));
}

/// Every `relay_…` name in `text` (metric names are `[a-z0-9_]`), but not label names in
/// templates (`{{relay_id}}`, `$labels.relay_id`) or matchers (`relay_id="…"`).
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("relay_") {
        let start = i + at;
        let before = start.checked_sub(1).map(|b| bytes[b]);
        let boundary = !before.is_some_and(|b| b.is_ascii_alphanumeric() || b"_.{/".contains(&b));
        let end = start
            + text[start..]
                .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
                .unwrap_or(text.len() - start);
        let label = text[end..].starts_with('=') || text[end..].starts_with('}');
        if boundary && !label {
            names.insert(text[start..end].to_owned());
        }
        i = end;
    }
    names
}

/// What the relay serves: each family's sample names (`_total` for counters; `_bucket`,
/// `_sum`, `_count` for histograms), with whether it has help text.
fn served(relay: &Relay) -> (BTreeSet<String>, String) {
    let (status, body) = relay.admin("GET", "/metrics");
    assert_eq!(status, 200, "{body}");
    let mut names = BTreeSet::new();
    for line in body.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').unwrap();
        assert!(
            body.lines()
                .any(|l| l.starts_with(&format!("# HELP {name} ")) && l.len() > name.len() + 12),
            "no help text for {name}:\n{body}"
        );
        names.insert(name.to_owned());
        if kind == "histogram" {
            for suffix in ["_bucket", "_sum", "_count"] {
                names.insert(format!("{name}{suffix}"));
            }
        }
    }
    (names, body)
}

#[test]
fn every_metric_the_dashboard_and_alerts_use_exists_with_help_text() {
    let dir = TempDir::new("monitoring");
    let relay = Relay::start(dir.path(), RelayOptions::default());
    let (served, body) = served(&relay);
    assert!(served.len() >= 20, "{body}");
    for file in ["grafana-dashboard.json", "prometheus-rules.yml"] {
        let text = std::fs::read_to_string(packaging(file)).unwrap();
        let used = metric_names(&text);
        assert!(used.len() >= 10, "{file}: {used:?}");
        let missing: Vec<&String> = used.iter().filter(|n| !served.contains(*n)).collect();
        assert!(
            missing.is_empty(),
            "{file} uses metrics the relay does not serve: {missing:?}\n{body}"
        );
    }
}

#[test]
fn the_dashboard_and_the_rules_parse() {
    let check = r#"
import json, sys, yaml
dash = json.load(open(sys.argv[1]))
assert dash["panels"] and all(p["targets"] for p in dash["panels"]), "panels without queries"
rules = yaml.safe_load(open(sys.argv[2]))
alerts = [r for g in rules["groups"] for r in g["rules"]]
assert alerts, "no rules"
for r in alerts:
    assert r["alert"] and r["expr"] and r["labels"]["severity"] and r["annotations"]["summary"], r
print(len(dash["panels"]), len(alerts))
"#;
    let out = Command::new("python3")
        .arg("-c")
        .arg(check)
        .arg(packaging("grafana-dashboard.json"))
        .arg(packaging("prometheus-rules.yml"))
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
