//! Another project's own test suite through the relay: go-sql-driver/mysql's (the driver of
//! Go's `database/sql`; Debian's `golang-github-go-sql-driver-mysql-dev` ships its sources
//! with its tests, and `tests/clients/install` compiles them with `go test -c`).
//!
//! The suite runs once straight against a stock MariaDB, and then through a relay whose
//! instance pauses after one idle second, so it pauses and wakes many times during the run
//! and the suite's connections take both routes: in switch mode (stock MariaDB) and in dual
//! mode (MariaDB with `perceptron_dual`). Each relayed run must give every test the outcome the
//! straight run gave it, except the differences listed in [`EXPECTED_DIFFERENCES`], each with
//! its reason. Our own tests walk the paths we thought of; this suite walks the driver's.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use tests::relay::{PASSWORD, Relay, RelayOptions, USER};
use tests::{TempDir, mariadb, run_with_input, target_dir};

/// The database the suite works in (`MYSQL_TEST_DBNAME`).
const DATABASE: &str = "gotest";

/// How long one run of the suite's binary may take (the whole suite takes about 35 s straight
/// on an idle machine).
const SUITE_TIMEOUT: Duration = Duration::from_secs(600);

/// Tests left out of every run, with the reason.
const LEFT_OUT: &[(&str, &str)] = &[(
    "TestConnectorReturnsTimeout",
    "dials 1.1.1.1:1234 and expects a network error, which depends on the machine's network, \
     not on the server",
)];

/// Tests whose outcome through the relay differs from the straight run, with the reason.
const EXPECTED_DIFFERENCES: &[(&str, &str)] = &[];

/// One test's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Pass,
    Fail,
    Skip,
}

/// The suite's outcomes, by test name (subtests as `Parent/sub`).
type Outcomes = BTreeMap<String, Outcome>;

/// Reads `go test -v` output: every `--- PASS|FAIL|SKIP: <name> (<time>)` line.
fn parse_outcomes(text: &str) -> Outcomes {
    text.lines()
        .filter_map(|line| {
            let rest = line.trim_start().strip_prefix("--- ")?;
            let (word, rest) = rest.split_once(": ")?;
            let outcome = match word {
                "PASS" => Outcome::Pass,
                "FAIL" => Outcome::Fail,
                "SKIP" => Outcome::Skip,
                _ => return None,
            };
            let name = rest.split_whitespace().next()?;
            Some((name.to_owned(), outcome))
        })
        .collect()
}

/// The compiled suite.
fn suite() -> PathBuf {
    let path = target_dir().join("clients/go/go-sql-driver-suite");
    assert!(
        path.is_file(),
        "{} not found: run tests/clients/install (scripts/test does)",
        path.display()
    );
    path
}

/// How many top-level tests one run of the suite's binary takes.
const CHUNK: usize = 15;

/// The top-level tests but those in [`LEFT_OUT`], as `-test.run` patterns of [`CHUNK`] tests
/// each.
fn chunks() -> Vec<String> {
    let out = Command::new(suite())
        .args(["-test.list", "."])
        .output()
        .expect("listing the suite's tests");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|n| n.starts_with("Test") && !LEFT_OUT.iter().any(|(left, _)| left == n))
        .map(str::to_owned)
        .collect();
    assert!(names.len() > 50, "the suite lists only {names:?}");
    names
        .chunks(CHUNK)
        .map(|chunk| format!("^({})$", chunk.join("|")))
        .collect()
}

/// Runs the suite against `port` as `user`, [`CHUNK`] tests at a time, calling `between`
/// before each chunk; in a scratch directory under `dir` (the suite writes files for
/// `LOAD DATA LOCAL INFILE` there). Returns the outcomes and the output.
fn run_suite(
    dir: &std::path::Path,
    port: u16,
    user: &str,
    password: &str,
    mut between: impl FnMut(),
) -> (Outcomes, String) {
    let mut text = String::new();
    for pattern in chunks() {
        between();
        let mut cmd = Command::new(suite());
        cmd.current_dir(dir)
            .env("TMPDIR", dir)
            .env("MYSQL_TEST_USER", user)
            .env("MYSQL_TEST_PASS", password)
            .env("MYSQL_TEST_PROT", "tcp")
            .env("MYSQL_TEST_ADDR", format!("127.0.0.1:{port}"))
            .env("MYSQL_TEST_DBNAME", DATABASE)
            .args(["-test.v", "-test.count=1", "-test.run", &pattern]);
        let out = run_with_input(&mut cmd, b"", SUITE_TIMEOUT);
        text.push_str(&out.stdout);
        text.push_str(&out.stderr);
    }
    let outcomes = parse_outcomes(&text);
    assert!(
        outcomes.len() > 50,
        "the suite reported only {} outcomes:\n{text}",
        outcomes.len(),
    );
    (outcomes, text)
}

/// Creates the suite's account and database through `relay` (logged in as `root`, whose
/// password is empty).
fn create_account(relay: &Relay, plugin: &str) {
    let out = mariadb(
        relay.port,
        "root",
        None,
        &[],
        &format!(
            "CREATE USER {USER}@'%' IDENTIFIED VIA {plugin} USING PASSWORD('{PASSWORD}');\
             GRANT ALL ON *.* TO {USER}@'%'; CREATE DATABASE {DATABASE};"
        ),
    );
    assert_eq!(out.code, Some(0), "{}\nlog:\n{}", out.stderr, relay.log());
}

/// The straight run, made once for every test in this file: the suite against a stock
/// MariaDB's own port (the relay in front of it only started it, and its instance does not
/// pause during the run).
fn straight_outcomes() -> &'static Outcomes {
    static STRAIGHT: OnceLock<Outcomes> = OnceLock::new();
    STRAIGHT.get_or_init(|| {
        let dir = TempDir::new("suite-straight");
        let relay = tests::mariadb::switch_relay(dir.path(), &[], RelayOptions::default());
        create_account(&relay, "mysql_native_password");
        assert_eq!(relay.state(), "running", "log:\n{}", relay.log());
        let (outcomes, text) = run_suite(dir.path(), relay.compute_port, USER, PASSWORD, || {});
        eprintln!("go-sql-driver/mysql suite, straight to MariaDB:\n{text}");
        outcomes
    })
}

/// The relay options of a relayed run: the instance pauses after one idle second.
fn pausing() -> RelayOptions {
    RelayOptions {
        idle_pause_after: "1s",
        ..RelayOptions::default()
    }
}

/// Compares a relayed run with the straight one and fails on any difference not in
/// [`EXPECTED_DIFFERENCES`]; `wakes` is how many times the instance woke during the run.
fn compare(what: &str, relayed: &Outcomes, text: &str, relay: &Relay, wakes: f64) {
    let straight = straight_outcomes();
    let mut table = String::new();
    let mut unexplained = Vec::new();
    let names: std::collections::BTreeSet<&String> =
        straight.keys().chain(relayed.keys()).collect();
    for name in names {
        let (a, b) = (straight.get(name), relayed.get(name));
        if a == b {
            continue;
        }
        let reason = EXPECTED_DIFFERENCES
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, why)| *why);
        let _ = writeln!(table, "  {name}: straight {a:?}, {what} {b:?} ({reason:?})");
        if reason.is_none() {
            unexplained.push(name.clone());
        }
    }
    let count = |o: &Outcomes, want: Outcome| o.values().filter(|v| **v == want).count();
    eprintln!(
        "go-sql-driver/mysql suite, {what}: {} tests; straight {} passed, {} failed, {} skipped; \
         relayed {} passed, {} failed, {} skipped; the instance woke {wakes} times\n\
         differences:\n{table}",
        relayed.len(),
        count(straight, Outcome::Pass),
        count(straight, Outcome::Fail),
        count(straight, Outcome::Skip),
        count(relayed, Outcome::Pass),
        count(relayed, Outcome::Fail),
        count(relayed, Outcome::Skip),
    );
    assert!(
        unexplained.is_empty(),
        "{what}: outcomes differ from the straight run in {unexplained:?}\n{table}\n\
         relayed output:\n{text}\nrelay log:\n{}",
        relay.log()
    );
    // Every chunk starts on a paused instance.
    let chunks = f64::from(u32::try_from(chunks().len()).unwrap());
    assert!(
        wakes >= chunks,
        "{what}: the instance woke {wakes} times, fewer than the suite's {chunks} chunks"
    );
}

/// Waits until the instance has paused by itself (one idle second), so the next chunk of the
/// suite wakes it.
fn wait_for_pause(relay: &Relay) {
    assert!(
        Relay::wait_until(Duration::from_secs(60), || relay.state() == "paused"),
        "the instance did not pause when idle (is {})\nlog:\n{}",
        relay.state(),
        relay.log()
    );
}

/// The instance's successful wakes so far.
fn wakes(relay: &Relay) -> f64 {
    relay.metric("relay_wakes_total{instance=\"demo\",outcome=\"ok\"}")
}

#[test]
fn go_sql_driver_suite_gives_the_same_outcomes_through_the_relay_in_switch_mode() {
    let dir = TempDir::new("suite-switch");
    let relay = tests::mariadb::switch_relay(dir.path(), &[], pausing());
    create_account(&relay, "mysql_native_password");
    let before = wakes(&relay);
    let (outcomes, text) = run_suite(dir.path(), relay.port, USER, PASSWORD, || {
        wait_for_pause(&relay);
    });
    let woke = wakes(&relay) - before;
    compare("switch mode", &outcomes, &text, &relay, woke);
}

#[test]
fn go_sql_driver_suite_gives_the_same_outcomes_through_the_relay_in_dual_mode() {
    let dir = TempDir::new("suite-dual");
    let relay = tests::mariadb::dual_relay_using(dir.path(), &[], pausing());
    // root keeps mysql_native_password, which a dual relay cannot complete on the perceptron
    // route: it sets up on the direct route.
    if relay.state() != "running" {
        let (status, body) = relay.admin("POST", "/v1/instances/demo/resume");
        assert_eq!(status, 200, "resume: {body}\nlog:\n{}", relay.log());
    }
    assert!(
        Relay::wait_until(Duration::from_secs(60), || relay.state() == "running"),
        "log:\n{}",
        relay.log()
    );
    create_account(&relay, "perceptron_dual");
    let before = wakes(&relay);
    let (outcomes, text) = run_suite(dir.path(), relay.port, USER, PASSWORD, || {
        wait_for_pause(&relay);
    });
    let woke = wakes(&relay) - before;
    compare("dual mode", &outcomes, &text, &relay, woke);
}

#[test]
fn parses_go_test_verbose_output() {
    let text = "=== RUN   TestA\n--- PASS: TestA (0.00s)\n=== RUN   TestB\n    \
                --- SKIP: TestB/sub (0.00s)\n--- FAIL: TestB (1.20s)\n    x_test.go:3: boom\n\
                PASS\nok  \tpkg\t1.2s\n";
    let got = parse_outcomes(text);
    let want: Outcomes = [
        ("TestA".to_owned(), Outcome::Pass),
        ("TestB".to_owned(), Outcome::Fail),
        ("TestB/sub".to_owned(), Outcome::Skip),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, want);
}
