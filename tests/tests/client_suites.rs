//! Another project's own test suite through the relay: go-sql-driver/mysql's (the driver of
//! Go's `database/sql`; Debian's `golang-github-go-sql-driver-mysql-dev` ships its sources
//! with its tests, and `tests/clients/install` compiles them with `go test -c`).
//!
//! The suite runs once straight against a stock MariaDB, and then through a relay whose
//! instance pauses after one idle second, so it pauses and wakes many times during the run
//! and the suite's connections take both routes: in switch mode (stock MariaDB) and in dual
//! mode (MariaDB with `perceptron_dual`). A third run, in dual mode with resumable sessions and
//! `force_reattach_every = 1`, carries every session to a new login after every command, its
//! state read and restored by value, as after a stop; a fourth does the same on server-shim,
//! compared with the suite straight to the shim. Each relayed run must give every test the
//! outcome the straight run gave it, except the differences listed in [`EXPECTED_DIFFERENCES`],
//! each with its reason. Our own tests walk the paths we thought of; this suite walks the
//! driver's.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, OnceLock, PoisonError};
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

/// The straight run's tests that do not pass, with the reason: the suite's or the machine's,
/// not the server's. A relayed run must end them the same way, a failure with the same
/// messages.
const STRAIGHT_NOT_PASSING: &[(&str, Outcome, &str)] = &[
    (
        "TestCharset",
        Outcome::Fail,
        "expects the name utf8 where MariaDB 10.11 says utf8mb3",
    ),
    (
        "TestCollation",
        Outcome::Fail,
        "expects utf8_unicode_ci where MariaDB 10.11 says utf8mb3_unicode_ci",
    ),
    (
        "TestTLS",
        Outcome::Skip,
        "the MariaDB of these tests has no TLS configured",
    ),
    (
        "TestConcurrent",
        Outcome::Skip,
        "runs only with MYSQL_TEST_CONCURRENT set",
    ),
];

/// One test's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Pass,
    Fail,
    Skip,
}

/// How one test ended, and what it logged (`<file>_test.go:<line>: ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Ended {
    outcome: Outcome,
    messages: Vec<String>,
}

impl Ended {
    /// The same outcome, and for a failure the same messages. A skip the suite marks
    /// `[WARN]` counts as a pass ([`Self::settled`]).
    fn agrees_with(&self, other: &Self) -> bool {
        self.settled() == other.settled()
            && (self.outcome != Outcome::Fail || self.messages == other.messages)
    }

    /// The outcome, where a skip the suite marks `[WARN]` is a pass: the suite's own word
    /// for a timing it could not check (`TestContextCancel*`: "expected val to be 1, got 0",
    /// an `INSERT … SLEEP(1)` not finished within the second it waits, which a loaded machine
    /// gives straight to the compute as well as through the relay), not a server's answer.
    fn settled(&self) -> Outcome {
        let inconclusive =
            self.outcome == Outcome::Skip && self.messages.iter().any(|m| m.contains("[WARN]"));
        if inconclusive {
            Outcome::Pass
        } else {
            self.outcome
        }
    }
}

/// The suite's outcomes, by test name (subtests as `Parent/sub`).
type Outcomes = BTreeMap<String, Ended>;

/// Reads `go test -v` output: every `--- PASS|FAIL|SKIP: <name> (<time>)` line, with the
/// messages logged since the test's `=== RUN` (or `=== CONT`) line.
fn parse_outcomes(text: &str) -> Outcomes {
    let mut outcomes = Outcomes::new();
    let mut messages: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(name) = trimmed
            .strip_prefix("=== RUN")
            .or_else(|| trimmed.strip_prefix("=== CONT"))
        {
            current = Some(name.trim().to_owned());
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix("--- ") {
            let Some((word, rest)) = rest.split_once(": ") else {
                continue;
            };
            let outcome = match word {
                "PASS" => Outcome::Pass,
                "FAIL" => Outcome::Fail,
                "SKIP" => Outcome::Skip,
                _ => continue,
            };
            let Some(name) = rest.split_whitespace().next() else {
                continue;
            };
            let messages = messages.remove(name).unwrap_or_default();
            outcomes.insert(name.to_owned(), Ended { outcome, messages });
            // What follows a subtest's end is its parent's.
            current = name.rsplit_once('/').map(|(parent, _)| parent.to_owned());
            continue;
        }
        let is_message = line.starts_with("    ")
            && trimmed
                .split_once(": ")
                .is_some_and(|(place, _)| place.contains("_test.go:"));
        if let (true, Some(name)) = (is_message, &current) {
            messages
                .entry(name.clone())
                .or_default()
                .push(without_temp_names(trimmed));
        }
    }
    outcomes
}

/// `message` with the random part of the suite's temporary files' names (`gotest` and digits,
/// Go's `os.CreateTemp`) left out: two runs name them differently.
fn without_temp_names(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find("gotest") {
        let (before, from) = rest.split_at(at + "gotest".len());
        out.push_str(before);
        out.push('…');
        rest = from.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    out.push_str(rest);
    out
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

/// The suite's top-level tests but those in [`LEFT_OUT`].
fn listed() -> Vec<String> {
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
}

/// Runs the suite against `port` as `user`, [`CHUNK`] tests at a time (one run of its binary
/// each, which must end with exit code 0 or 1: a panic or a timeout loses the rest of the
/// chunk), calling `between` before each chunk; in a scratch directory under `dir` (the suite
/// writes files for `LOAD DATA LOCAL INFILE` there). Every listed test must have an outcome.
/// Returns the outcomes, the output and how many chunks ran.
fn run_suite(
    dir: &std::path::Path,
    port: u16,
    user: &str,
    password: &str,
    mut between: impl FnMut(),
) -> (Outcomes, String, usize) {
    let names = listed();
    let mut text = String::new();
    let mut chunks = 0;
    for chunk in names.chunks(CHUNK) {
        between();
        chunks += 1;
        let mut cmd = Command::new(suite());
        cmd.current_dir(dir)
            .env("TMPDIR", dir)
            .env("MYSQL_TEST_USER", user)
            .env("MYSQL_TEST_PASS", password)
            .env("MYSQL_TEST_PROT", "tcp")
            .env("MYSQL_TEST_ADDR", format!("127.0.0.1:{port}"))
            .env("MYSQL_TEST_DBNAME", DATABASE)
            .args(["-test.v", "-test.count=1", "-test.run"])
            .arg(format!("^({})$", chunk.join("|")));
        let out = run_with_input(&mut cmd, b"", SUITE_TIMEOUT);
        text.push_str(&out.stdout);
        text.push_str(&out.stderr);
        assert!(
            matches!(out.code, Some(0 | 1)),
            "the suite's binary ended with {:?} (a panic, a timeout?) on {chunk:?}:\n{text}",
            out.code
        );
    }
    let outcomes = parse_outcomes(&text);
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !outcomes.contains_key(*n))
        .collect();
    assert!(missing.is_empty(), "no outcome for {missing:?}:\n{text}");
    (outcomes, text, chunks)
}

/// One run of the suite at a time: its tests have timing bounds of their own (a context
/// cancelled after 500 ms), which two runs sharing 2 cores could break.
static ONE_RUN_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Creates the suite's account and database through `relay` (logged in as `root`, whose
/// password is empty).
fn create_account(relay: &Relay, plugin: &str) {
    create_account_on(relay, relay.port, plugin);
}

/// [`create_account`] on `port`: the relay's, or the compute's own where the relay has no
/// direct route (`resumable_sessions`).
fn create_account_on(relay: &Relay, port: u16, plugin: &str) {
    let out = mariadb(
        port,
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
/// pause during the run). Its tests that do not pass are those of [`STRAIGHT_NOT_PASSING`].
fn straight_outcomes() -> &'static Outcomes {
    static STRAIGHT: OnceLock<Outcomes> = OnceLock::new();
    STRAIGHT.get_or_init(|| {
        let _one = ONE_RUN_AT_A_TIME
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let dir = TempDir::new("suite-straight");
        let relay = tests::mariadb::switch_relay(dir.path(), &[], RelayOptions::default());
        create_account(&relay, "mysql_native_password");
        assert_eq!(relay.state(), "running", "log:\n{}", relay.log());
        let (outcomes, text, _) = run_suite(dir.path(), relay.compute_port, USER, PASSWORD, || {});
        let not_passing: Vec<(&str, Outcome)> = outcomes
            .iter()
            .filter(|(_, e)| e.settled() != Outcome::Pass)
            .map(|(n, e)| (n.as_str(), e.outcome))
            .collect();
        let expected: Vec<(&str, Outcome)> = STRAIGHT_NOT_PASSING
            .iter()
            .map(|(n, o, _)| (*n, *o))
            .collect();
        let mut sorted = expected.clone();
        sorted.sort_unstable_by_key(|(n, _)| *n);
        assert_eq!(
            not_passing, sorted,
            "straight to MariaDB, the tests that do not pass are not those listed:\n{text}"
        );
        outcomes
    })
}

/// Runs the suite through `relay` (its instance pausing after an idle second), waiting before
/// each chunk until the instance has paused, and compares it with the straight run.
fn relayed_run(what: &str, relay: &Relay, dir: &std::path::Path) {
    let before = wakes(relay);
    let chunks = compared_run(what, straight_outcomes(), relay, dir, || {
        wait_for_pause(relay)
    });
    let woke = wakes(relay) - before;
    // Every chunk starts on a paused instance.
    let chunks = f64::from(u32::try_from(chunks).unwrap());
    assert!(
        woke >= chunks,
        "{what}: the instance woke {woke} times, fewer than the suite's {chunks} chunks"
    );
}

/// Runs the suite through `relay`, calling `between` before each chunk, and compares it with
/// `straight` (the same suite straight to the compute); returns how many chunks ran.
fn compared_run(
    what: &str,
    straight: &Outcomes,
    relay: &Relay,
    dir: &std::path::Path,
    between: impl FnMut(),
) -> usize {
    let _one = ONE_RUN_AT_A_TIME
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let (relayed, text, chunks) = run_suite(dir, relay.port, USER, PASSWORD, between);
    let mut table = String::new();
    let mut unexplained = Vec::new();
    let names: BTreeSet<&String> = straight.keys().chain(relayed.keys()).collect();
    for name in names {
        let (a, b) = (straight.get(name), relayed.get(name));
        if a.zip(b).is_some_and(|(a, b)| a.agrees_with(b)) {
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
    let count = |o: &Outcomes, want: Outcome| o.values().filter(|e| e.outcome == want).count();
    eprintln!(
        "go-sql-driver/mysql suite, {what}: {} outcomes; straight {} passed, {} failed, {} \
         skipped; relayed {} passed, {} failed, {} skipped; {chunks} runs of the suite's \
         binary\ndifferences:\n{table}",
        relayed.len(),
        count(straight, Outcome::Pass),
        count(straight, Outcome::Fail),
        count(straight, Outcome::Skip),
        count(&relayed, Outcome::Pass),
        count(&relayed, Outcome::Fail),
        count(&relayed, Outcome::Skip),
    );
    assert!(
        unexplained.is_empty(),
        "{what}: outcomes differ from the straight run in {unexplained:?}\n{table}\n\
         relayed output:\n{text}\nrelay log:\n{}",
        relay.log()
    );
    chunks
}

/// The relay options of a relayed run: the instance pauses after one idle second.
fn pausing() -> RelayOptions {
    RelayOptions {
        idle_pause_after: "1s",
        ..RelayOptions::default()
    }
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
    relayed_run("switch mode", &relay, dir.path());
}

#[test]
fn go_sql_driver_suite_gives_the_same_outcomes_through_the_relay_in_dual_mode() {
    let dir = TempDir::new("suite-dual");
    let relay = tests::mariadb::dual_relay_using(dir.path(), &[], pausing());
    // root keeps mysql_native_password, which a dual relay cannot complete on the perceptron
    // route: it sets up on the direct route.
    relay.resume();
    create_account(&relay, "perceptron_dual");
    relayed_run("dual mode", &relay, dir.path());
}

/// Transparency of sessions carried by value (docs/parking.md, *Sessions across a stop*):
/// with `force_reattach_every = 1`, after every command each session between commands has
/// its state read from MariaDB and is logged in again with its ticket, its state restored
/// from those values, as after a stop. The suite must give every test the straight run's
/// outcome; the boundaries carried and those pinned (a transaction, a lock) are counted.
#[test]
fn go_sql_driver_suite_gives_the_same_outcomes_with_sessions_reattached_after_every_command() {
    let dir = TempDir::new("suite-forced");
    let ticket_key = dir.path().join("tickets.key");
    tests::relay::keygen(&ticket_key, "tickets-1");
    let relay = tests::mariadb::dual_relay_using(
        dir.path(),
        &[
            &format!(
                "--loose-perceptron-dual-ticket-key-file={}",
                ticket_key.display()
            ),
            "--loose-perceptron-dual-instance=demo",
        ],
        RelayOptions {
            instance_toml: "stop_after = \"1h\"\nresumable_sessions = true\n\
                            force_reattach_every = 1\n"
                .into(),
            ..RelayOptions::default()
        },
    );
    relay.resume();
    // Every login of a resumable instance is the relay's: root sets up on the compute itself.
    create_account_on(&relay, relay.compute_port, "perceptron_dual");
    compared_run(
        "dual mode, reattached after every command",
        straight_outcomes(),
        &relay,
        dir.path(),
        || {},
    );
    count_boundaries(&relay);
}

/// The same on server-shim, a compute we wrote: its straight run (to the shim's own port) has
/// failures of its own (functions it refuses, `KILL QUERY`, multi-statement text), and the run
/// with every session reattached after every command must end every test the same way.
#[test]
fn go_sql_driver_suite_gives_server_shims_outcomes_with_sessions_reattached_after_every_command() {
    let dir = TempDir::new("suite-shim-forced");
    let d = dir.path();
    let ticket_key = d.join("tickets.key");
    tests::relay::keygen(&ticket_key, "tickets-1");
    let shim = |flag: &str, value: &std::path::Path| [flag.to_owned(), value.display().to_string()];
    let relay = Relay::start(
        d,
        RelayOptions {
            command: Some(
                [
                    vec![
                        tests::bin_path("server-shim").display().to_string(),
                        "run".into(),
                        "--listen".into(),
                        "127.0.0.1:{COMPUTE_PORT}".into(),
                        // The suite's transaction-isolation test waits for a lock it never
                        // gets: both runs fail it, sooner.
                        "--lock-wait-timeout".into(),
                        "5s".into(),
                        "--instance".into(),
                        "demo".into(),
                    ],
                    shim("--data", &d.join("data")).into(),
                    shim("--key-file", &d.join("perceptron.key")).into(),
                    shim("--ticket-key-file", &ticket_key).into(),
                ]
                .concat(),
            ),
            instance_toml: "stop_after = \"1h\"\nresumable_sessions = true\n\
                            force_reattach_every = 1\n"
                .into(),
            ..RelayOptions::default()
        },
    );
    relay.resume();
    let out = mariadb(
        relay.compute_port,
        USER,
        Some(PASSWORD),
        &[],
        &format!("CREATE DATABASE {DATABASE}"),
    );
    assert_eq!(out.code, Some(0), "{}\nlog:\n{}", out.stderr, relay.log());
    let straight = {
        let _one = ONE_RUN_AT_A_TIME
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        run_suite(d, relay.compute_port, USER, PASSWORD, || {}).0
    };
    let passed = straight
        .values()
        .filter(|e| e.outcome == Outcome::Pass)
        .count();
    assert!(
        passed > 100,
        "only {passed} tests pass straight to server-shim"
    );
    compared_run(
        "server-shim, reattached after every command",
        &straight,
        &relay,
        d,
        || {},
    );
    count_boundaries(&relay);
}

/// Counts, from `relay`'s log, the command boundaries at which a session was carried to a new
/// login and those at which it was pinned (by reason); there must be no failed reattach, and
/// more than a hundred carried.
fn count_boundaries(relay: &Relay) {
    let carried = relay.log_count("session reattached by force");
    let log = relay.log();
    let mut reasons: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for line in log
        .lines()
        .filter(|l| l.contains("forced reattach skipped"))
    {
        let why = line
            .split("why=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or("?");
        *reasons.entry(why).or_default() += 1;
    }
    let pinned: usize = reasons.values().sum();
    eprintln!(
        "command boundaries: {carried} carried to a new login, {pinned} pinned ({:.1} % \
         carried); pinned by: {reasons:?}",
        100.0 * carried as f64 / (carried + pinned).max(1) as f64
    );
    assert_eq!(
        relay.log_count("forced reattach failed"),
        0,
        "{}",
        relay.log()
    );
    assert!(carried > 100, "only {carried} boundaries were carried");
}

#[test]
fn parses_go_test_verbose_output() {
    let text = [
        "=== RUN   TestA",
        "    a_test.go:9: a log line",
        "--- PASS: TestA (0.00s)",
        "=== RUN   TestB",
        "=== RUN   TestB/sub",
        "    --- SKIP: TestB/sub (0.00s)",
        "    b_test.go:3: boom in /tmp/gotest2910508073/x",
        "--- FAIL: TestB (1.20s)",
        "not a message: x",
        "FAIL",
    ]
    .join("\n");
    let text = text.as_str();
    let got = parse_outcomes(text);
    let ended = |outcome, messages: &[&str]| Ended {
        outcome,
        messages: messages.iter().map(|m| (*m).to_owned()).collect(),
    };
    let want: Outcomes = [
        (
            "TestA".to_owned(),
            ended(Outcome::Pass, &["a_test.go:9: a log line"]),
        ),
        (
            "TestB".to_owned(),
            ended(Outcome::Fail, &["b_test.go:3: boom in /tmp/gotest…/x"]),
        ),
        ("TestB/sub".to_owned(), ended(Outcome::Skip, &[])),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, want);
    assert!(!want["TestB"].agrees_with(&ended(Outcome::Fail, &["other"])));
    assert!(want["TestA"].agrees_with(&ended(Outcome::Pass, &["other"])));
    // The suite's inconclusive skip agrees with a pass; another skip does not.
    let warned = ended(
        Outcome::Skip,
        &["driver_test.go:2406: [WARN] expected val to be 1, got 0"],
    );
    assert!(want["TestA"].agrees_with(&warned) && warned.agrees_with(&want["TestA"]));
    assert!(!want["TestA"].agrees_with(&want["TestB/sub"]));
}
