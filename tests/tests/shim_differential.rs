//! server-shim against MariaDB 10.11, statement by statement: the corpus
//! `tests/differential/corpus.sql` runs on both, and server-shim must give MariaDB's answer
//! (the same values and column types, or the same error) or refuse with an error of its own —
//! never a different answer. Where it still does, the case is listed in
//! `tests/differential/known-disagreements.txt` (being fixed); the list may only
//! shrink: a listed case that now agrees, or is refused, fails the test until it is taken off.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::collections::BTreeSet;
use std::time::Duration;

use tests::relay::{Relay, RelayOptions};
use tests::{TempDir, run_with_input, shim_with_admin};

const PW: &str = "root-secret-pw";

fn file(name: &str) -> String {
    format!("{}/differential/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The value of `"key": <number>` in the runner's JSON.
fn count(json: &str, key: &str) -> usize {
    let at = json.find(&format!("\"{key}\": ")).unwrap() + key.len() + 4;
    json[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn server_shim_answers_as_mariadb_does_or_refuses() {
    let maria_dir = TempDir::new("differential-mariadb");
    // Debian's packaged default (the shim's): text in utf8mb4, compared in utf8mb4_general_ci.
    let maria = tests::mariadb::switch_relay(
        maria_dir.path(),
        &[
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_general_ci",
        ],
        RelayOptions::default(),
    );
    let (code, body) = maria.admin("POST", "/v1/instances/demo/resume");
    assert_eq!(code, 200, "{body}");
    assert!(Relay::wait_until(Duration::from_secs(60), || maria.state() == "running"));
    let shim_dir = TempDir::new("differential-shim");
    let shim = shim_with_admin(&shim_dir, "root", PW);
    let mut cmd = std::process::Command::new("python3");
    cmd.arg(file("compare.py"))
        .arg(file("corpus.sql"))
        .arg(maria.compute_port.to_string())
        .arg(shim.port.to_string())
        .arg(PW);
    let out = run_with_input(&mut cmd, b"", Duration::from_secs(300));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let json = out.stdout;
    let (agree, refused, disagree) = (
        count(&json, "agree"),
        count(&json, "refused"),
        count(&json, "disagree"),
    );
    eprintln!(
        "differential corpus: {} cases: {agree} agree, {refused} refused by server-shim, \
         {disagree} disagree",
        agree + refused + disagree
    );
    // Each case the runner reports, by kind: `"sql": "...", "kind": "..."`.
    let reported = |kind: &str| -> BTreeSet<String> {
        json.split("\"sql\": ")
            .skip(1)
            .filter(|c| c.contains(&format!("\"kind\": \"{kind}\"")))
            .map(|c| {
                let quoted: String =
                    serde_json::from_str::<String>(&c[..c.find(",\n").unwrap()]).unwrap();
                quoted
            })
            .collect()
    };
    let disagreeing = reported("disagree");
    let known: BTreeSet<String> = std::fs::read_to_string(file("known-disagreements.txt"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    let new: Vec<&String> = disagreeing.difference(&known).collect();
    let fixed: Vec<&String> = known.difference(&disagreeing).collect();
    assert!(
        new.is_empty(),
        "server-shim answers these differently from MariaDB (make it answer as MariaDB does, \
         or refuse): {new:#?}\n{json}"
    );
    assert!(
        fixed.is_empty(),
        "these no longer disagree: take them off known-disagreements.txt: {fixed:#?}"
    );
}
