//! The real-client matrix: six stock MySQL clients against one relay with a managed
//! instance — server-shim, MariaDB in switch mode, and MariaDB with the `perceptron_dual` plugin
//! in dual mode — each on both routes — the perceptron route (instance paused: the relay
//! greets, wakes the compute and relays the login) and the direct route (instance running: raw
//! bytes to the compute) — with a query, a server-side prepared statement and a wrong password.
//! With `[instance.tls]` an instance has no direct route: the TLS matrices' "direct" cells run
//! against the running instance and are relayed, as every such login is.
//!
//! The clients are driven by small runner programs under `tests/clients/` (installed and built
//! by `tests/clients/install`; a missing client fails this test, it is never skipped). Every
//! runner takes `--host --port --user --password --database --mode query|prepared|wrongpw` and
//! prints one JSON line `{"ok", "rows", "error_code", "error"}` (plus `"na": true` where the
//! client has no prepared statements), so the same runners can be pointed at any server.
//! Each cell also checks, with the relay's metrics, that the connection took the route the cell
//! names. The results table is printed (see it with `--nocapture`); `docs/clients.md` has the
//! one observed.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tests::relay::{PASSWORD, Relay, RelayOptions, USER};
use tests::{TempDir, mariadb, run_with_input, target_dir};

/// The database every cell connects to (the shim answers `SELECT 1+1` only with one selected).
const DATABASE: &str = "m";
/// How long one client run may take (a JVM start and compile included).
const CELL_TIMEOUT: Duration = Duration::from_secs(90);

// ---------------------------------------------------------------------------------------------
// The runners

/// A client of the matrix and how its runner is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    MariadbCli,
    PyMySql,
    MysqlConnectorPython,
    NodeMysql2,
    ConnectorJ,
    MysqlAsync,
}

impl Client {
    const ALL: [Self; 6] = [
        Self::MariadbCli,
        Self::PyMySql,
        Self::MysqlConnectorPython,
        Self::NodeMysql2,
        Self::ConnectorJ,
        Self::MysqlAsync,
    ];

    fn label(self) -> &'static str {
        match self {
            Self::MariadbCli => "`mariadb` CLI",
            Self::PyMySql => "PyMySQL",
            Self::MysqlConnectorPython => "mysql-connector-python (pure)",
            Self::NodeMysql2 => "Node mysql2",
            Self::ConnectorJ => "MariaDB Connector/J",
            Self::MysqlAsync => "Rust mysql_async",
        }
    }

    /// Whether the client has server-side prepared statements (COM_STMT_PREPARE/EXECUTE).
    fn has_prepared(self) -> bool {
        !matches!(self, Self::MariadbCli | Self::PyMySql)
    }

    /// The runner command, without the connection and mode arguments.
    fn command(self) -> Command {
        let dir = clients_dir();
        match self {
            Self::MariadbCli => python_command(&dir.join("mariadb-cli/runner.py"), &[]),
            Self::PyMySql => {
                python_command(&dir.join("python/runner.py"), &["--driver", "pymysql"])
            }
            Self::MysqlConnectorPython => python_command(
                &dir.join("python/runner.py"),
                &["--driver", "mysql-connector"],
            ),
            Self::NodeMysql2 => {
                let mut cmd = Command::new("node");
                cmd.arg(dir.join("node/runner.js"));
                cmd
            }
            Self::ConnectorJ => {
                // Quick-start flags: the runner is a short-lived process.
                let mut cmd = Command::new("java");
                cmd.args(["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp"])
                    .arg(format!(
                        "{CONNECTOR_J_JAR}:{}",
                        connector_j_classes().display()
                    ))
                    .arg("Runner");
                cmd
            }
            Self::MysqlAsync => Command::new(mysql_async_runner()),
        }
    }

    /// Panics (the client is missing: run `tests/clients/install`) unless its runner can start.
    fn check_installed(self) {
        let dir = clients_dir();
        let missing = match self {
            Self::MariadbCli => which("mariadb")
                .is_none()
                .then(|| "the mariadb CLI".to_owned()),
            Self::PyMySql => python_lacks("pymysql"),
            Self::MysqlConnectorPython => python_lacks("mysql.connector"),
            Self::NodeMysql2 => (which("node").is_none()
                || !dir.join("node/node_modules/mysql2/package.json").is_file())
            .then(|| "node and tests/clients/node/node_modules/mysql2".to_owned()),
            Self::ConnectorJ => (which("java").is_none()
                || !Path::new(CONNECTOR_J_JAR).is_file()
                || !connector_j_classes().join("Runner.class").is_file())
            .then(|| {
                format!(
                    "java, {CONNECTOR_J_JAR} (libmariadb-java) and {}/Runner.class",
                    connector_j_classes().display()
                )
            }),
            Self::MysqlAsync => (!mysql_async_runner().is_file())
                .then(|| mysql_async_runner().display().to_string()),
        };
        if let Some(what) = missing {
            panic!(
                "client {} is not installed: {what} is missing; run tests/clients/install",
                self.label()
            );
        }
    }
}

const CONNECTOR_J_JAR: &str = "/usr/share/java/mariadb-java-client.jar";

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("clients")
}

fn connector_j_classes() -> PathBuf {
    target_dir().join("clients/java")
}

fn mysql_async_runner() -> PathBuf {
    target_dir().join("clients/debug/client-runner-mysql-async")
}

fn python_command(script: &Path, extra: &[&str]) -> Command {
    let mut cmd = Command::new("python3");
    cmd.arg(script).args(extra);
    cmd
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(program))
            .find(|p| p.is_file())
    })
}

fn python_lacks(module: &str) -> Option<String> {
    let ok = Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    (!ok).then(|| format!("python3 module {module}"))
}

/// What a runner is pointed at.
#[derive(Debug, Clone)]
struct Target {
    host: String,
    port: u16,
    user: String,
    password: String,
    database: String,
    /// TLS with full verification against this CA (`--ssl-ca`); `None`: no TLS.
    ssl_ca: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Query,
    Prepared,
    WrongPassword,
}

impl Mode {
    const ALL: [Self; 3] = [Self::Query, Self::Prepared, Self::WrongPassword];

    fn arg(self) -> &'static str {
        match self {
            Self::Query => "query",
            Self::Prepared => "prepared",
            Self::WrongPassword => "wrongpw",
        }
    }
}

/// One runner's report, parsed from its JSON line.
#[derive(Debug, Clone)]
struct Report {
    ok: bool,
    na: bool,
    rows: Vec<Vec<Option<String>>>,
    error_code: Option<u32>,
    error: Option<String>,
    /// The runner's raw output (for failure messages).
    raw: String,
    elapsed: Duration,
}

/// Runs `client` once against `target` in `mode`. A runner that crashes or prints no JSON
/// gives a report with `ok == false` and its output as the error.
fn run_client(client: Client, target: &Target, mode: Mode) -> Report {
    let mut cmd = client.command();
    cmd.args(["--host", &target.host])
        .args(["--port", &target.port.to_string()])
        .args(["--user", &target.user])
        .args(["--password", &target.password])
        .args(["--database", &target.database])
        .args(["--mode", mode.arg()]);
    if let Some(ca) = &target.ssl_ca {
        cmd.args(["--ssl-ca", ca]);
    }
    let started = Instant::now();
    let out = run_with_input(&mut cmd, b"", CELL_TIMEOUT);
    let elapsed = started.elapsed();
    let raw = format!(
        "exit code {:?}\nstdout: {}\nstderr: {}",
        out.code, out.stdout, out.stderr
    );
    let line = out.stdout.lines().rev().find(|l| l.starts_with('{'));
    let parsed = match (out.code, line) {
        (Some(0), Some(line)) => json::parse(line).ok(),
        _ => None,
    };
    let Some(v) = parsed else {
        return Report {
            ok: false,
            na: false,
            rows: Vec::new(),
            error_code: None,
            error: Some(format!("runner failed: {raw}")),
            raw,
            elapsed,
        };
    };
    let rows = v
        .get("rows")
        .and_then(json::Value::as_array)
        .unwrap_or_default()
        .iter()
        .map(|row| {
            row.as_array()
                .unwrap_or_default()
                .iter()
                .map(|c| c.as_str().map(str::to_owned))
                .collect()
        })
        .collect();
    Report {
        ok: v.get("ok").and_then(json::Value::as_bool).unwrap_or(false),
        na: v.get("na").and_then(json::Value::as_bool).unwrap_or(false),
        rows,
        error_code: v
            .get("error_code")
            .and_then(json::Value::as_f64)
            .map(|c| c as u32),
        error: v
            .get("error")
            .and_then(json::Value::as_str)
            .map(str::to_owned),
        raw,
        elapsed,
    }
}

// ---------------------------------------------------------------------------------------------
// The cells

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Perceptron,
    Direct,
}

impl Route {
    fn name(self) -> &'static str {
        match self {
            Self::Perceptron => "perceptron",
            Self::Direct => "direct",
        }
    }
}

/// What the relay's counters said about one cell's connections.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct RouteCounters {
    relayed: f64,
    denied: f64,
    malformed: f64,
    forwarded: f64,
}

impl RouteCounters {
    fn read(relay: &Relay) -> Self {
        let (status, body) = relay.admin("GET", "/metrics");
        assert_eq!(status, 200, "metrics: {body}");
        let sample = |series: &str| {
            body.lines()
                .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
                .unwrap_or(0.0)
        };
        Self {
            relayed: sample("relay_connections_total{instance=\"demo\",outcome=\"relayed\"}"),
            denied: sample("relay_connections_total{instance=\"demo\",outcome=\"denied\"}"),
            malformed: sample("relay_connections_total{instance=\"demo\",outcome=\"malformed\"}"),
            forwarded: sample(
                "relay_direct_connections_total{instance=\"demo\",outcome=\"forwarded\"}",
            ),
        }
    }

    /// What one cell's connection adds: exactly one connection, on the cell's route.
    fn expected(route: Route, mode: Mode) -> Self {
        match (route, mode) {
            (Route::Perceptron, Mode::WrongPassword) => Self {
                denied: 1.0,
                ..Self::default()
            },
            (Route::Perceptron, _) => Self {
                relayed: 1.0,
                ..Self::default()
            },
            (Route::Direct, _) => Self {
                forwarded: 1.0,
                ..Self::default()
            },
        }
    }

    /// The change since `before` once it reaches `want`, or as it is after 30 s. The relay
    /// counts a connection when its task ends, which on a loaded machine can be after the
    /// client has read its ERR and exited: read at once, the count could land in the next
    /// cell.
    fn settled(relay: &Relay, before: Self, want: Self) -> Self {
        let mut routed = Self::default();
        Relay::wait_until(Duration::from_secs(30), || {
            routed = Self::read(relay).since(before);
            routed == want
        });
        routed
    }

    fn since(self, before: Self) -> Self {
        Self {
            relayed: self.relayed - before.relayed,
            denied: self.denied - before.denied,
            malformed: self.malformed - before.malformed,
            forwarded: self.forwarded - before.forwarded,
        }
    }
}

struct Cell {
    client: Client,
    route: Route,
    mode: Mode,
    report: Report,
    /// Why the cell failed; `None` when it passed.
    failure: Option<String>,
}

impl Cell {
    fn summary(&self) -> String {
        if let Some(f) = &self.failure {
            let first = f.lines().next().unwrap_or_default();
            return format!("**FAIL**: {first}");
        }
        if self.report.na {
            return "n/a".into();
        }
        match self.mode {
            Mode::WrongPassword => format!(
                "{} ({} ms)",
                self.report.error_code.unwrap_or(0),
                self.report.elapsed.as_millis()
            ),
            _ => format!("ok ({} ms)", self.report.elapsed.as_millis()),
        }
    }
}

fn wait_for_state(relay: &Relay, state: &str) {
    assert!(
        Relay::wait_until(Duration::from_secs(60), || relay.state() == state),
        "instance did not reach {state} (is {})\nlog:\n{}",
        relay.state(),
        relay.log()
    );
}

/// Puts the instance in the state the route needs.
fn prepare_route(relay: &Relay, route: Route) {
    match route {
        Route::Perceptron => {
            relay.pause();
            wait_for_state(relay, "paused");
        }
        Route::Direct => {
            if relay.state() != "running" {
                let (status, body) = relay.admin("POST", "/v1/instances/demo/resume");
                assert_eq!(status, 200, "resume: {body}\nlog:\n{}", relay.log());
                wait_for_state(relay, "running");
            }
        }
    }
}

/// Why `report` (of `mode`, with the route's counter changes `routed`) is not what the cell
/// must show, or `None`.
fn judge(
    client: Client,
    route: Route,
    mode: Mode,
    report: &Report,
    routed: RouteCounters,
) -> Option<String> {
    let expected_rows: Vec<Vec<Option<String>>> = match mode {
        Mode::Query => vec![
            vec![Some(format!("{USER}@127.0.0.1"))],
            vec![Some("2".into())],
        ],
        Mode::Prepared => vec![vec![Some("42".into())], vec![Some("hi!".into())]],
        Mode::WrongPassword => Vec::new(),
    };
    let error = || {
        format!(
            "{} {}",
            report
                .error_code
                .map_or_else(|| "-".into(), |c| c.to_string()),
            report.error.as_deref().unwrap_or("")
        )
    };
    // The client's own result.
    if mode == Mode::Prepared && !client.has_prepared() {
        return (!report.na).then(|| format!("expected n/a, got {}", report.raw));
    }
    if report.na {
        return Some(format!("runner said n/a: {}", report.raw));
    }
    match mode {
        Mode::Query | Mode::Prepared if !report.ok => return Some(error()),
        Mode::Query | Mode::Prepared if report.rows != expected_rows => {
            return Some(format!(
                "rows {:?}, expected {expected_rows:?}",
                report.rows
            ));
        }
        Mode::WrongPassword if report.ok || report.error_code != Some(1045) => {
            return Some(format!("expected ERR 1045, got {}", error()));
        }
        _ => {}
    }
    // The route the connection took: exactly one connection, on the cell's route.
    let want = RouteCounters::expected(route, mode);
    (routed != want).then(|| format!("route counters changed by {routed:?}, expected {want:?}"))
}

fn markdown_table(cells: &[Cell]) -> String {
    let mut t = String::from(
        "| client | perceptron: login + query | perceptron: prepared | perceptron: wrong password \
         | direct: login + query | direct: prepared | direct: wrong password |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for client in Client::ALL {
        let _ = write!(t, "| {} |", client.label());
        for route in [Route::Perceptron, Route::Direct] {
            for mode in Mode::ALL {
                let summary = cells
                    .iter()
                    .find(|c| c.client == client && c.route == route && c.mode == mode)
                    .map_or_else(|| "not run".into(), Cell::summary);
                let _ = write!(t, " {summary} |");
            }
        }
        t.push('\n');
    }
    t
}

#[test]
fn every_client_logs_in_queries_prepares_and_is_refused_on_both_routes() {
    for client in Client::ALL {
        client.check_installed();
    }
    let dir = TempDir::new("client-matrix");
    let relay = Relay::start(dir.path(), RelayOptions::default());
    let out = mariadb(
        relay.port,
        USER,
        Some(PASSWORD),
        &[],
        &format!("CREATE DATABASE {DATABASE}"),
    );
    assert_eq!(out.code, Some(0), "{}\nlog:\n{}", out.stderr, relay.log());
    run_matrix(&relay, "dual mode, server-shim");
}

#[test]
fn every_client_works_in_switch_mode_against_a_stock_mariadb() {
    for client in Client::ALL {
        client.check_installed();
    }
    let dir = TempDir::new("client-matrix-maria");
    let relay = tests::mariadb::switch_relay(dir.path(), &[], RelayOptions::default());
    // The same account and database as on the shim, so every expectation is shared.
    let out = mariadb(
        relay.port,
        "root",
        None,
        &[],
        &format!(
            "CREATE USER {USER}@'%' IDENTIFIED VIA mysql_native_password USING PASSWORD('{PASSWORD}');\
             GRANT ALL ON *.* TO {USER}@'%'; CREATE DATABASE {DATABASE};"
        ),
    );
    assert_eq!(out.code, Some(0), "{}\nlog:\n{}", out.stderr, relay.log());
    run_matrix(&relay, "switch mode, MariaDB 10.11");
}

#[test]
fn every_client_works_in_dual_mode_against_mariadb_with_the_perceptron_dual_plugin() {
    for client in Client::ALL {
        client.check_installed();
    }
    let dir = TempDir::new("client-matrix-maria-dual");
    let relay = tests::mariadb::dual_relay(dir.path(), &[]);
    // root keeps mysql_native_password, which a dual relay cannot complete: it sets up on the
    // direct route.
    prepare_route(&relay, Route::Direct);
    let out = mariadb(
        relay.port,
        "root",
        None,
        &[],
        &format!(
            "CREATE USER {USER}@'%' IDENTIFIED VIA perceptron_dual USING PASSWORD('{PASSWORD}');\
             GRANT ALL ON *.* TO {USER}@'%'; CREATE DATABASE {DATABASE};"
        ),
    );
    assert_eq!(out.code, Some(0), "{}\nlog:\n{}", out.stderr, relay.log());
    run_matrix(&relay, "dual mode, MariaDB 10.11 with perceptron_dual");
}

#[test]
fn every_client_works_over_verified_tls_on_both_routes() {
    for client in Client::ALL {
        client.check_installed();
    }
    // The relay terminates every login's TLS, paused or running (the instance has no direct
    // route), and server-shim serves the same certificate on its own address; both refuse
    // logins without TLS.
    let dir = TempDir::new("client-matrix-tls");
    let certs = tests::tls::Certs::new(dir.path());
    let command = vec![
        tests::bin_path("server-shim").display().to_string(),
        "run".into(),
        "--listen".into(),
        "127.0.0.1:{COMPUTE_PORT}".into(),
        "--data".into(),
        dir.path().join("data").display().to_string(),
        "--key-file".into(),
        dir.path().join("perceptron.key").display().to_string(),
        "--tls-cert".into(),
        certs.path("good-server.pem"),
        "--tls-key".into(),
        certs.path("good-server.key"),
        "--require-secure-transport".into(),
    ];
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            command: Some(command),
            instance_toml: certs.offer_toml(),
            ..RelayOptions::default()
        },
    );
    let ca = certs.path("good-ca.pem");
    let out = mariadb(
        relay.port,
        USER,
        Some(PASSWORD),
        &[
            "--ssl",
            "--ssl-verify-server-cert",
            &format!("--ssl-ca={ca}"),
        ],
        &format!("CREATE DATABASE {DATABASE}"),
    );
    assert_eq!(out.code, Some(0), "{}\nlog:\n{}", out.stderr, relay.log());
    run_matrix_with(&relay, "dual mode, server-shim, verified TLS", Some(ca));
}

#[test]
fn every_client_works_over_verified_tls_in_switch_mode_against_a_stock_mariadb() {
    for client in Client::ALL {
        client.check_installed();
    }
    // The relay terminates every login's TLS, paused or running, and speaks TLS to MariaDB
    // (compute_tls = "verify"), which serves the same certificate on its own address. Both
    // refuse logins without TLS.
    let dir = TempDir::new("client-matrix-maria-tls");
    let certs = tests::tls::Certs::new(dir.path());
    let ca = certs.path("good-ca.pem");
    let ssl = [
        format!("--ssl-cert={}", certs.path("good-server.pem")),
        format!("--ssl-key={}", certs.path("good-server.key")),
        "--require-secure-transport=ON".to_owned(),
    ];
    let ssl: Vec<&str> = ssl.iter().map(String::as_str).collect();
    let relay = tests::mariadb::switch_relay(
        dir.path(),
        &ssl,
        RelayOptions {
            instance_toml: format!(
                "compute_tls = \"verify\"\ncompute_ca = \"{ca}\"\ncompute_tls_name = \"localhost\"\n{}",
                certs.offer_toml()
            ),
            ..RelayOptions::default()
        },
    );
    let out = mariadb(
        relay.port,
        "root",
        None,
        &[
            "--ssl",
            "--ssl-verify-server-cert",
            &format!("--ssl-ca={ca}"),
        ],
        &format!(
            "CREATE USER {USER}@'%' IDENTIFIED VIA mysql_native_password USING PASSWORD('{PASSWORD}');\
             GRANT ALL ON *.* TO {USER}@'%'; CREATE DATABASE {DATABASE};"
        ),
    );
    assert_eq!(out.code, Some(0), "{}\nlog:\n{}", out.stderr, relay.log());
    run_matrix_with(
        &relay,
        "switch mode, MariaDB 10.11, verified TLS on every leg",
        Some(ca),
    );
}

/// Runs every client × mode × route against `relay`'s instance and fails with every failing
/// cell (and the table) if any.
fn run_matrix(relay: &Relay, what: &str) {
    run_matrix_with(relay, what, None);
}

/// [`run_matrix`], every client with TLS verified against `ssl_ca` when given.
fn run_matrix_with(relay: &Relay, what: &str, ssl_ca: Option<String>) {
    let good = Target {
        host: "127.0.0.1".into(),
        port: relay.port,
        user: USER.into(),
        password: PASSWORD.into(),
        database: DATABASE.into(),
        ssl_ca,
    };
    let bad = Target {
        password: "not-the-password".into(),
        ..good.clone()
    };
    // An instance with a certificate of the relay's has no direct route: the relay reads every
    // TLS login, also while the instance runs, to charge its failures to the budgets.
    let counted_as = |route: Route| {
        if good.ssl_ca.is_some() {
            Route::Perceptron
        } else {
            route
        }
    };
    let started = Instant::now();
    let mut cells = Vec::new();
    for client in Client::ALL {
        for mode in Mode::ALL {
            let target = if mode == Mode::WrongPassword {
                &bad
            } else {
                &good
            };
            // Perceptron first: it leaves the instance running for the direct cell.
            for route in [Route::Perceptron, Route::Direct] {
                if mode == Mode::Prepared && !client.has_prepared() {
                    let report = run_client(client, target, mode);
                    let failure = judge(
                        client,
                        counted_as(route),
                        mode,
                        &report,
                        RouteCounters::default(),
                    );
                    cells.push(Cell {
                        client,
                        route,
                        mode,
                        report,
                        failure,
                    });
                    continue;
                }
                prepare_route(relay, route);
                let before = RouteCounters::read(relay);
                let report = run_client(client, target, mode);
                let want = RouteCounters::expected(counted_as(route), mode);
                let routed = RouteCounters::settled(relay, before, want);
                let failure = judge(client, counted_as(route), mode, &report, routed);
                cells.push(Cell {
                    client,
                    route,
                    mode,
                    report,
                    failure,
                });
            }
        }
    }
    let table = markdown_table(&cells);
    println!(
        "\nClient matrix, {what} ({} cells in {:.1} s):\n\n{table}",
        cells.len(),
        started.elapsed().as_secs_f64()
    );

    let failures: Vec<String> = cells
        .iter()
        .filter_map(|c| {
            c.failure.as_ref().map(|f| {
                format!(
                    "- {} / {} route / {}: {f}\n  runner output: {}",
                    c.client.label(),
                    c.route.name(),
                    c.mode.arg(),
                    c.report.raw.replace('\n', "\n  ")
                )
            })
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cells failed:\n{}\n\n{table}\nrelay log:\n{}",
        failures.len(),
        cells.len(),
        failures.join("\n"),
        relay.log()
    );
}

// ---------------------------------------------------------------------------------------------
// A minimal JSON reader for the runners' one-line reports (the tests crate has no JSON
// dependency).

mod json {
    /// A JSON value.
    #[derive(Debug, Clone, PartialEq)]
    pub enum Value {
        Null,
        Bool(bool),
        Number(f64),
        String(String),
        Array(Vec<Value>),
        Object(Vec<(String, Value)>),
    }

    impl Value {
        pub fn get(&self, key: &str) -> Option<&Value> {
            match self {
                Self::Object(fields) => fields.iter().find(|(k, _)| k == key).map(|(_, v)| v),
                _ => None,
            }
        }

        pub fn as_str(&self) -> Option<&str> {
            match self {
                Self::String(s) => Some(s),
                _ => None,
            }
        }

        pub fn as_bool(&self) -> Option<bool> {
            match self {
                Self::Bool(b) => Some(*b),
                _ => None,
            }
        }

        pub fn as_f64(&self) -> Option<f64> {
            match self {
                Self::Number(n) => Some(*n),
                _ => None,
            }
        }

        pub fn as_array(&self) -> Option<&[Value]> {
            match self {
                Self::Array(a) => Some(a),
                _ => None,
            }
        }
    }

    /// Parses one JSON document (with nothing but whitespace after it).
    pub fn parse(text: &str) -> Result<Value, String> {
        let mut p = Parser {
            chars: text.chars().collect(),
            pos: 0,
        };
        let v = p.value()?;
        p.ws();
        if p.pos == p.chars.len() {
            Ok(v)
        } else {
            Err(format!("trailing characters at {}", p.pos))
        }
    }

    struct Parser {
        chars: Vec<char>,
        pos: usize,
    }

    impl Parser {
        fn peek(&self) -> Option<char> {
            self.chars.get(self.pos).copied()
        }

        fn next(&mut self) -> Result<char, String> {
            let c = self.peek().ok_or("unexpected end")?;
            self.pos += 1;
            Ok(c)
        }

        fn ws(&mut self) {
            while self.peek().is_some_and(char::is_whitespace) {
                self.pos += 1;
            }
        }

        fn literal(&mut self, word: &str, v: Value) -> Result<Value, String> {
            for expected in word.chars() {
                if self.next()? != expected {
                    return Err(format!("bad literal at {}", self.pos));
                }
            }
            Ok(v)
        }

        fn value(&mut self) -> Result<Value, String> {
            self.ws();
            match self.peek().ok_or("unexpected end")? {
                'n' => self.literal("null", Value::Null),
                't' => self.literal("true", Value::Bool(true)),
                'f' => self.literal("false", Value::Bool(false)),
                '"' => self.string().map(Value::String),
                '[' => {
                    self.pos += 1;
                    let mut items = Vec::new();
                    self.ws();
                    if self.peek() == Some(']') {
                        self.pos += 1;
                        return Ok(Value::Array(items));
                    }
                    loop {
                        items.push(self.value()?);
                        self.ws();
                        match self.next()? {
                            ',' => {}
                            ']' => return Ok(Value::Array(items)),
                            c => return Err(format!("expected , or ] but got {c:?}")),
                        }
                    }
                }
                '{' => {
                    self.pos += 1;
                    let mut fields = Vec::new();
                    self.ws();
                    if self.peek() == Some('}') {
                        self.pos += 1;
                        return Ok(Value::Object(fields));
                    }
                    loop {
                        self.ws();
                        let key = self.string()?;
                        self.ws();
                        if self.next()? != ':' {
                            return Err(format!("expected : at {}", self.pos));
                        }
                        fields.push((key, self.value()?));
                        self.ws();
                        match self.next()? {
                            ',' => {}
                            '}' => return Ok(Value::Object(fields)),
                            c => return Err(format!("expected , or }} but got {c:?}")),
                        }
                    }
                }
                _ => {
                    let start = self.pos;
                    while self
                        .peek()
                        .is_some_and(|c| c.is_ascii_digit() || "+-.eE".contains(c))
                    {
                        self.pos += 1;
                    }
                    let text: String = self.chars[start..self.pos].iter().collect();
                    text.parse()
                        .map(Value::Number)
                        .map_err(|e| format!("bad number {text:?}: {e}"))
                }
            }
        }

        fn hex4(&mut self) -> Result<u32, String> {
            let mut n = 0;
            for _ in 0..4 {
                let d = self.next()?.to_digit(16).ok_or("bad \\u escape")?;
                n = n * 16 + d;
            }
            Ok(n)
        }

        fn string(&mut self) -> Result<String, String> {
            if self.next()? != '"' {
                return Err(format!("expected a string at {}", self.pos));
            }
            let mut s = String::new();
            loop {
                match self.next()? {
                    '"' => return Ok(s),
                    '\\' => match self.next()? {
                        'n' => s.push('\n'),
                        't' => s.push('\t'),
                        'r' => s.push('\r'),
                        'b' => s.push('\u{8}'),
                        'f' => s.push('\u{c}'),
                        'u' => {
                            let mut code = self.hex4()?;
                            if (0xD800..0xDC00).contains(&code)
                                && self.peek() == Some('\\')
                                && self.chars.get(self.pos + 1) == Some(&'u')
                            {
                                self.pos += 2;
                                let low = self.hex4()?;
                                code =
                                    0x10000 + ((code - 0xD800) << 10) + (low.wrapping_sub(0xDC00));
                            }
                            s.push(char::from_u32(code).unwrap_or('\u{fffd}'));
                        }
                        c => s.push(c),
                    },
                    c => s.push(c),
                }
            }
        }
    }

    #[test]
    fn parses_a_runner_report() {
        let v = parse(
            r#"{"ok": false, "rows": [["a\u00e9\"", null], ["2"]], "error_code": 1045, "error": "x\ny", "na": true}"#,
        )
        .expect("parses");
        assert_eq!(v.get("ok").and_then(Value::as_bool), Some(false));
        assert_eq!(v.get("error_code").and_then(Value::as_f64), Some(1045.0));
        assert_eq!(v.get("error").and_then(Value::as_str), Some("x\ny"));
        let rows = v.get("rows").and_then(Value::as_array).expect("rows");
        assert_eq!(rows[0].as_array().expect("row")[0].as_str(), Some("aé\""));
        assert_eq!(rows[0].as_array().expect("row")[1], Value::Null);
        assert!(parse("{} x").is_err());
    }
}
