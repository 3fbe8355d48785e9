//! TLS on the client leg, end to end: the relay terminates MySQL's in-band TLS on
//! the perceptron route while a paused server-shim instance wakes, with the stock `mariadb`
//! CLI (full verification: `--ssl-verify-server-cert --ssl-ca`) and PyMySQL with a CA.
//! Certificates are made here with the `openssl` CLI.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use authplugin::packet::HandshakeV10;
use authplugin::packet::capabilities::CLIENT_SSL;
use tests::relay::{PASSWORD, Relay, RelayOptions, USER};
use tests::tls::{Certs, SERVER_EXT, openssl, pki};
use tests::{Output, TempDir, bin_path, run_with_input, wait_for_greeting};

fn tls_relay(dir: &Path, certs: &Certs, client_ca: bool) -> Relay {
    Relay::start(
        dir,
        RelayOptions {
            instance_toml: certs.instance_toml(client_ca),
            ..RelayOptions::default()
        },
    )
}

/// The `mariadb` CLI against the relay, with `tls` options (none: `--skip-ssl`).
fn mariadb(port: u16, tls: &[String], sql: &str) -> Output {
    let mut cmd = Command::new("mariadb");
    cmd.arg("-h127.0.0.1")
        .arg(format!("-P{port}"))
        .arg(format!("-u{USER}"))
        .arg(format!("-p{PASSWORD}"))
        .args(["-N", "-B"])
        .arg(tests::connect_timeout_arg(10));
    if tls.is_empty() {
        cmd.arg("--skip-ssl");
    }
    cmd.args(tls).arg("-e").arg(sql);
    run_with_input(&mut cmd, b"", Duration::from_secs(60))
}

/// Full verification against `ca` (`--ssl --ssl-verify-server-cert --ssl-ca`).
fn verified(certs: &Certs, ca: &str) -> Vec<String> {
    vec![
        "--ssl".into(),
        "--ssl-verify-server-cert".into(),
        format!("--ssl-ca={}", certs.path(ca)),
    ]
}

fn class_metric(relay: &Relay, class: &str) -> f64 {
    relay.metric(&format!(
        "relay_classifications_total{{instance=\"demo\",class=\"{class}\"}}"
    ))
}

#[test]
fn mariadb_cli_logs_in_over_verified_tls_and_nothing_else_wakes_the_instance() {
    let dir = TempDir::new("relay-tls-cli");
    let certs = Certs::new(dir.path());
    let relay = tls_relay(dir.path(), &certs, false);
    assert_eq!(relay.state(), "paused");

    // Without TLS: MySQL's ERR 3159, and no wake.
    let out = mariadb(relay.port, &[], "SELECT 1");
    assert_ne!(out.code, Some(0));
    assert!(
        out.stderr.contains("ERROR 3159 (HY000)")
            && out.stderr.contains(
                "Connections using insecure transport are prohibited while \
                 --require_secure_transport=ON."
            ),
        "{out:?}"
    );
    // A client that trusts another CA refuses the relay's certificate: no wake either.
    let out = mariadb(relay.port, &verified(&certs, "other-ca.pem"), "SELECT 1");
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("ERROR 2026"), "{out:?}");
    assert_eq!(relay.state(), "paused");
    assert!(!relay.compute_listening());
    assert_eq!(class_metric(&relay, "insecure_transport"), 1.0);
    assert_eq!(class_metric(&relay, "tls_refused_by_client"), 1.0);

    // Verified TLS: the login wakes the instance and queries run, inside TLS (a plaintext
    // login could not have passed require_secure_transport).
    let out = mariadb(
        relay.port,
        &verified(&certs, "good-ca.pem"),
        "SELECT 40 + 2; SELECT USER()",
    );
    assert_eq!(out.code, Some(0), "{out:?}\n{}", relay.log());
    assert_eq!(out.stdout, "42\napp@127.0.0.1\n", "{out:?}");
    assert_eq!(relay.state(), "running");
    assert!(relay.logged("relayed login accepted"));
}

#[test]
fn pymysql_with_a_ca_logs_in_through_the_relay() {
    let dir = TempDir::new("relay-tls-py");
    let certs = Certs::new(dir.path());
    let relay = tls_relay(dir.path(), &certs, false);
    let code = format!(
        "import os, pymysql\n\
         c = pymysql.connect(host='127.0.0.1', port=int(os.environ['PORT']), user='{USER}',\n\
             password=os.environ['PW'], ssl={{'ca': '{ca}'}}, connect_timeout=10)\n\
         cur = c.cursor(); cur.execute('SELECT 6 * 7'); print(cur.fetchone()[0])\n\
         print(type(c._sock).__name__, c._sock.version())\n",
        ca = certs.path("good-ca.pem"),
    );
    // The wrong CA first (while paused, so the relay answers): PyMySQL refuses the relay's
    // certificate, and nothing wakes.
    let wrong = code.replace("good-ca.pem", "other-ca.pem");
    let mut cmd = Command::new("python3");
    cmd.arg("-c")
        .arg(&wrong)
        .env("PORT", relay.port.to_string())
        .env("PW", PASSWORD);
    let out = run_with_input(&mut cmd, b"", Duration::from_secs(60));
    assert_ne!(out.code, Some(0));
    assert!(out.stderr.contains("CERTIFICATE_VERIFY_FAILED"), "{out:?}");
    assert_eq!(relay.state(), "paused");
    let mut cmd = Command::new("python3");
    cmd.arg("-c")
        .arg(&code)
        .env("PORT", relay.port.to_string())
        .env("PW", PASSWORD);
    let out = run_with_input(&mut cmd, b"", Duration::from_secs(60));
    assert_eq!(out.code, Some(0), "{out:?}\n{}", relay.log());
    let mut lines = out.stdout.lines();
    assert_eq!(lines.next(), Some("42"));
    assert!(
        lines
            .next()
            .unwrap_or_default()
            .starts_with("SSLSocket TLSv1."),
        "{out:?}"
    );
}

#[test]
fn mutual_tls_refuses_an_unknown_client_certificate_without_a_wake() {
    let dir = TempDir::new("relay-tls-mutual");
    let certs = Certs::new(dir.path());
    let relay = tls_relay(dir.path(), &certs, true);
    let with_client = |name: &str| {
        let mut args = verified(&certs, "good-ca.pem");
        args.push(format!("--ssl-cert={}", certs.path(&format!("{name}.pem"))));
        args.push(format!("--ssl-key={}", certs.path(&format!("{name}.key"))));
        args
    };
    let out = mariadb(relay.port, &with_client("other-client"), "SELECT 1");
    assert_ne!(out.code, Some(0), "{out:?}");
    let out = mariadb(relay.port, &verified(&certs, "good-ca.pem"), "SELECT 1");
    assert_ne!(out.code, Some(0), "no client certificate: {out:?}");
    assert_eq!(relay.state(), "paused");
    assert!(!relay.compute_listening());
    assert_eq!(class_metric(&relay, "tls_client_cert_refused"), 2.0);

    let out = mariadb(relay.port, &with_client("good-client"), "SELECT 1");
    assert_eq!(out.code, Some(0), "{out:?}\n{}", relay.log());
    assert_eq!(out.stdout, "1\n");
}

#[test]
fn require_secure_transport_and_client_ca_hold_once_the_instance_runs() {
    let dir = TempDir::new("relay-tls-running");
    let certs = Certs::new(dir.path());
    // The managed server-shim itself accepts plaintext logins and no client certificates:
    // only the relay can hold clients to the instance's settings.
    let relay = tls_relay(dir.path(), &certs, true);
    let mut with_client = verified(&certs, "good-ca.pem");
    with_client.push(format!("--ssl-cert={}", certs.path("good-client.pem")));
    with_client.push(format!("--ssl-key={}", certs.path("good-client.key")));
    let out = mariadb(relay.port, &with_client, "SELECT 1");
    assert_eq!(out.code, Some(0), "{out:?}\n{}", relay.log());
    assert_eq!(relay.state(), "running");

    // Running: the plaintext login and the one without a client certificate are refused as
    // they were while paused, by the relay, and the instance keeps running.
    let out = mariadb(relay.port, &[], "SELECT 1");
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("ERROR 3159 (HY000)"), "{out:?}");
    let out = mariadb(relay.port, &verified(&certs, "good-ca.pem"), "SELECT 1");
    assert_ne!(out.code, Some(0), "no client certificate: {out:?}");
    assert_eq!(class_metric(&relay, "insecure_transport"), 1.0);
    assert_eq!(class_metric(&relay, "tls_client_cert_refused"), 1.0);
    let out = mariadb(relay.port, &with_client, "SELECT 6 * 7");
    assert_eq!(out.code, Some(0), "{out:?}\n{}", relay.log());
    assert_eq!(out.stdout, "42\n");
    assert_eq!(relay.state(), "running");
}

/// The capability flags of the greeting on `port` (relay's while paused, the compute's on the
/// direct route).
fn greeting_flags(port: u16) -> u32 {
    let payload = wait_for_greeting(port, Instant::now(), tests::READY_TIMEOUT).unwrap();
    HandshakeV10::decode(&payload).unwrap().capability_flags
}

/// PyMySQL logging in over verified TLS from `source` with `password`: 0, or the code of the
/// ERR it got (the compute's, or the relay's after the login or in place of the greeting).
fn tls_login_code(port: u16, certs: &Certs, source: &str, password: &str) -> u16 {
    let code = format!(
        "import os, pymysql\n\
         try:\n\
         \x20   pymysql.connect(host='127.0.0.1', port=int(os.environ['PORT']), user='{USER}',\n\
         \x20       password='{password}', bind_address='{source}', connect_timeout=10,\n\
         \x20       ssl={{'ca': '{}'}}).close()\n\
         \x20   print(0)\n\
         except pymysql.err.MySQLError as e:\n\
         \x20   print(e.args[0])\n",
        certs.path("good-ca.pem")
    );
    let out = tests::python(port, &code, Duration::from_secs(30));
    out.stdout
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("no outcome: {out:?}"))
}

/// With `[instance.tls]` the relay reads every login, also while the instance runs: a TLS
/// login never goes into the compute's own TLS, where the relay saw only ciphertext and
/// charged nothing (60 wrong TLS guesses against a blocked user all reached the compute,
/// then the right password logged in). Now TLS guesses spend the source's budget (ERR 1129
/// past it), and a blocked user is refused over TLS too (ERR 1226).
#[test]
fn tls_logins_to_a_running_instance_are_read_by_the_relay_and_charged_to_the_budgets() {
    let dir = TempDir::new("relay-tls-charged");
    let certs = Certs::new(dir.path());
    // The compute offers TLS of its own, as a direct route would have used.
    let command = tls_shim_command(dir.path(), &certs, false);
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            command: Some(command),
            instance_toml: certs.offer_toml(),
            relay_toml: "budgets = { failed_logins_per_source = 3, failed_logins_per_user = 3 }\n"
                .into(),
            ..RelayOptions::default()
        },
    );
    assert_eq!(tls_login_code(relay.port, &certs, "127.0.0.1", PASSWORD), 0);
    assert_eq!(relay.state(), "running");
    // Running, the greeting is still the relay's, offering TLS.
    assert_ne!(greeting_flags(relay.port) & CLIENT_SSL, 0);
    let codes: Vec<u16> = (0..5)
        .map(|i| tls_login_code(relay.port, &certs, "127.0.0.2", &format!("guess-{i}")))
        .collect();
    assert_eq!(codes, [1045, 1045, 1045, 1129, 1129], "{}", relay.log());
    // A failure from a second source blocks the user (failures from several sources), over
    // TLS as in plaintext: even the right password from a third is refused.
    assert_eq!(
        tls_login_code(relay.port, &certs, "127.0.0.3", "guess-x"),
        1045
    );
    assert_eq!(
        tls_login_code(relay.port, &certs, "127.0.0.4", PASSWORD),
        1226
    );
    assert_eq!(
        relay.log_count("route=\"direct\""),
        0,
        "every login was the relay's:\n{}",
        relay.log()
    );
    assert!(relay.logged("tls=true"), "{}", relay.log());
}

#[test]
fn a_new_certificate_is_served_after_sighup_and_a_bad_one_is_not() {
    let dir = TempDir::new("relay-tls-reload");
    let certs = Certs::new(dir.path());
    let relay = tls_relay(dir.path(), &certs, false);
    let expiry = "relay_tls_certificate_expiry_seconds{instance=\"demo\"}";
    let first = relay.metric(expiry);
    assert!(first > 1.7e9, "the served certificate's notAfter: {first}");
    let reloads = |outcome: &str| {
        relay.metric(&format!(
            "relay_tls_reloads_total{{instance=\"demo\",outcome=\"{outcome}\"}}"
        ))
    };
    let hup = || {
        let pid = relay.child.pid().unwrap().to_string();
        assert!(
            Command::new("kill")
                .args(["-HUP", &pid])
                .status()
                .unwrap()
                .success()
        );
    };

    // A certificate from another CA, valid for longer, written in place; SIGHUP.
    pki(&certs.dir, "next", &[("server", SERVER_EXT)]);
    openssl(
        &certs.dir,
        &[
            "x509",
            "-req",
            "-in",
            "next-server.csr",
            "-CA",
            "next-ca.pem",
            "-CAkey",
            "next-ca.key",
            "-CAcreateserial",
            "-out",
            "next-server.pem",
            "-days",
            "400",
            "-extfile",
            "next-server.ext",
        ],
    );
    std::fs::copy(
        certs.dir.join("next-server.key"),
        certs.dir.join("good-server.key"),
    )
    .unwrap();
    std::fs::copy(
        certs.dir.join("next-server.pem"),
        certs.dir.join("good-server.pem"),
    )
    .unwrap();
    hup();
    assert!(
        Relay::wait_until(Duration::from_secs(60), || reloads("ok") >= 1.0),
        "{}",
        relay.log()
    );
    assert!(relay.metric(expiry) > first + 300.0 * 86400.0);
    // New handshakes use it: the old CA no longer verifies it, the new one does.
    assert_eq!(
        tls_probe(relay.port, &certs.path("good-ca.pem")),
        "verify_failed"
    );
    assert_eq!(tls_probe(relay.port, &certs.path("next-ca.pem")), "ok");

    // A key that does not match: the reload fails, the previous certificate stays.
    std::fs::copy(
        certs.dir.join("good-client.key"),
        certs.dir.join("good-server.key"),
    )
    .unwrap();
    hup();
    assert!(
        Relay::wait_until(Duration::from_secs(60), || reloads("failed") >= 1.0),
        "{}",
        relay.log()
    );
    assert!(relay.log().contains("tls.key"), "the log names the key");
    assert_eq!(tls_probe(relay.port, &certs.path("next-ca.pem")), "ok");
    // None of this woke the instance.
    assert_eq!(relay.state(), "paused");
}

/// Asks for TLS the MySQL way (an SSLRequest after the greeting) and runs the handshake with
/// Python's `ssl`, verifying against `ca`, then closes without logging in (nothing wakes):
/// `ok` or `verify_failed`.
fn tls_probe(port: u16, ca: &str) -> String {
    let code = format!(
        "import socket, ssl, struct\n\
         s = socket.create_connection(('127.0.0.1', {port}))\n\
         h = s.recv(4); n = h[0] | h[1] << 8 | h[2] << 16; g = b''\n\
         while len(g) < n: g += s.recv(n - len(g))\n\
         flags = 0x200 | 0x8000 | 0x800 | 0x80000\n\
         s.sendall(bytes([32, 0, 0, 1]) + struct.pack('<IIB23s', flags, 1 << 24, 45, b''))\n\
         ctx = ssl.create_default_context(cafile='{ca}')\n\
         try:\n    ctx.wrap_socket(s, server_hostname='127.0.0.1').close(); print('ok')\n\
         except ssl.SSLCertVerificationError:\n    print('verify_failed')\n"
    );
    let mut cmd = Command::new("python3");
    cmd.arg("-c").arg(code);
    let out = run_with_input(&mut cmd, b"", Duration::from_secs(30));
    assert_eq!(out.code, Some(0), "{out:?}");
    out.stdout.trim().to_owned()
}

/// server-shim serving `good-server` over TLS on the instance's compute port.
fn tls_shim_command(dir: &Path, certs: &Certs, require: bool) -> Vec<String> {
    let mut command = vec![
        bin_path("server-shim").display().to_string(),
        "run".into(),
        "--listen".into(),
        "127.0.0.1:{COMPUTE_PORT}".into(),
        "--data".into(),
        dir.join("data").display().to_string(),
        "--key-file".into(),
        dir.join("perceptron.key").display().to_string(),
        "--tls-cert".into(),
        certs.path("good-server.pem"),
        "--tls-key".into(),
        certs.path("good-server.key"),
    ];
    if require {
        command.push("--require-secure-transport".into());
    }
    command
}

#[test]
fn compute_tls_verifies_the_computes_certificate_and_never_falls_back_to_plaintext() {
    let dir = TempDir::new("relay-tls-compute");
    let certs = Certs::new(dir.path());
    let start = |compute_toml: String, shim_tls: bool| {
        let sub = dir.path().join(format!("r{}", tests::free_port()));
        std::fs::create_dir_all(&sub).unwrap();
        let command = if shim_tls {
            Some(tls_shim_command(&sub, &certs, false))
        } else {
            None
        };
        Relay::start(
            &sub,
            RelayOptions {
                command,
                instance_toml: format!("{compute_toml}{}", certs.instance_toml(false)),
                ..RelayOptions::default()
            },
        )
    };
    let verify = |ca: &str| {
        format!(
            "compute_tls = \"verify\"\ncompute_ca = \"{}\"\ncompute_tls_name = \"localhost\"\n",
            certs.path(ca)
        )
    };

    // Verified TLS on both legs: the login goes through, and the shim says its leg is in TLS
    // as MariaDB would (aiomysql's own tests check `Ssl_version` so).
    let relay = start(verify("good-ca.pem"), true);
    let out = mariadb(
        relay.port,
        &verified(&certs, "good-ca.pem"),
        "SHOW STATUS LIKE 'Ssl_version%'",
    );
    assert_eq!(out.code, Some(0), "{out:?}\n{}", relay.log());
    assert!(out.stdout.starts_with("Ssl_version\tTLSv1."), "{out:?}");
    // On its own address in plaintext: an empty value.
    let out = mariadb(relay.compute_port, &[], "SHOW STATUS LIKE 'Ssl_version'");
    assert_eq!(out.stdout, "Ssl_version\t\n", "{out:?}");

    // A compute whose certificate the relay does not trust gets nothing of the client's.
    let relay = start(verify("other-ca.pem"), true);
    let out = mariadb(relay.port, &verified(&certs, "good-ca.pem"), "SELECT 1");
    assert!(out.stderr.contains("ERROR 1053"), "{out:?}");
    assert!(
        relay.logged("outcome=\"compute_tls_failed\""),
        "{}",
        relay.log()
    );
    assert_eq!(
        relay.log_count("route=\"relayed\""),
        0,
        "no relayed login reached it"
    );

    // compute_tls = "on" to a compute without TLS: refused, not sent in plaintext.
    let relay = start("compute_tls = \"on\"\n".into(), false);
    let out = mariadb(relay.port, &verified(&certs, "good-ca.pem"), "SELECT 1");
    assert!(out.stderr.contains("ERROR 1053"), "{out:?}");
    assert!(relay.logged("offers no TLS"), "{}", relay.log());
    assert_eq!(relay.log_count("route=\"relayed\""), 0);
}

#[test]
fn switch_mode_on_mariadb_uses_tls_on_every_leg_of_both_routes() {
    let dir = TempDir::new("relay-tls-mariadb");
    let certs = Certs::new(dir.path());
    // MariaDB serves the relay's certificate on the direct route and requires TLS itself.
    let ssl = [
        format!("--ssl-cert={}", certs.path("good-server.pem")),
        format!("--ssl-key={}", certs.path("good-server.key")),
        "--require-secure-transport=ON".to_owned(),
    ];
    let ssl: Vec<&str> = ssl.iter().map(String::as_str).collect();
    let ca = certs.path("good-ca.pem");
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
    let on = |port: u16, user: &str, password: &str, sql: &str| {
        let mut cmd = Command::new("mariadb");
        cmd.arg("-h127.0.0.1")
            .arg(format!("-P{port}"))
            .arg(format!("-u{user}"))
            .arg(format!("--password={password}"))
            .args(["-N", "-B"])
            .arg(tests::connect_timeout_arg(30))
            .args(verified(&certs, "good-ca.pem"))
            .arg("-e")
            .arg(sql);
        run_with_input(&mut cmd, b"", Duration::from_secs(90))
    };
    let as_user = |user: &str, password: &str, sql: &str| on(relay.port, user, password, sql);
    // The wake: root (empty password) over TLS to the relay, TLS from the relay to MariaDB.
    let out = as_user(
        "root",
        "",
        "CREATE USER nat@'%' IDENTIFIED VIA mysql_native_password USING PASSWORD('nat-pw');\
         GRANT ALL ON *.* TO nat@'%'; SHOW STATUS LIKE 'Ssl_version'",
    );
    assert_eq!(out.code, Some(0), "{out:?}\n{}", relay.log());
    assert!(
        out.stdout.starts_with("Ssl_version\tTLSv1."),
        "MariaDB saw the relayed login inside TLS: {out:?}"
    );

    // Paused again: the perceptron route, switch mode, both legs in TLS.
    let (status, body) = relay.admin("POST", "/v1/instances/demo/pause?force=true");
    assert_eq!(status, 200, "{body}");
    let relayed = || relay.metric("relay_connections_total{instance=\"demo\",outcome=\"relayed\"}");
    let before = relayed();
    let out = as_user(
        "nat",
        "nat-pw",
        "SELECT CURRENT_USER(); SHOW STATUS LIKE 'Ssl_version'",
    );
    assert_eq!(out.code, Some(0), "{out:?}\n{}", relay.log());
    assert!(
        out.stdout.starts_with("nat@%\nSsl_version\tTLSv1."),
        "{out:?}"
    );
    assert_eq!(relayed(), before + 1.0);
    let wrong = as_user("nat", "wrong", "SELECT 1");
    assert!(wrong.stderr.contains("ERROR 1045 (28000)"), "{wrong:?}");

    // Running: the relay still reads every login (it terminates the client's TLS and can
    // charge a wrong password), TLS on both legs.
    let out = as_user("nat", "nat-pw", "SHOW STATUS LIKE 'Ssl_version'");
    assert_eq!(out.code, Some(0), "{out:?}\n{}", relay.log());
    assert!(out.stdout.starts_with("Ssl_version\tTLSv1."), "{out:?}");
    assert_eq!(relayed(), before + 2.0, "{}", relay.log());
    // MariaDB on its own address terminates a client's TLS itself and refuses plaintext
    // (10.11 answers it with its ERR 1045, where MySQL and the relay send 3159).
    let out = on(
        relay.compute_port,
        "nat",
        "nat-pw",
        "SHOW STATUS LIKE 'Ssl_version'",
    );
    assert!(out.stdout.starts_with("Ssl_version\tTLSv1."), "{out:?}");
    let mut cmd = Command::new("mariadb");
    cmd.arg("-h127.0.0.1")
        .arg(format!("-P{}", relay.compute_port))
        .args(["-unat", "--password=nat-pw", "--skip-ssl", "-e", "SELECT 1"]);
    let out = run_with_input(&mut cmd, b"", Duration::from_secs(30));
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("ERROR 1045"), "{out:?}");
}

#[test]
fn dual_mode_on_mariadb_with_perceptron_dual_over_tls_on_both_legs() {
    let dir = TempDir::new("relay-tls-maria-dual");
    let certs = Certs::new(dir.path());
    let ssl = [
        format!("--ssl-cert={}", certs.path("good-server.pem")),
        format!("--ssl-key={}", certs.path("good-server.key")),
    ];
    let ssl: Vec<&str> = ssl.iter().map(String::as_str).collect();
    let ca = certs.path("good-ca.pem");
    let relay = tests::mariadb::dual_relay_with(
        dir.path(),
        &ssl,
        &format!(
            "compute_tls = \"verify\"\ncompute_ca = \"{ca}\"\ncompute_tls_name = \"localhost\"\n{}",
            certs.offer_toml()
        ),
    );
    let on = |port: u16, user: &str, password: &str, sql: &str| {
        let mut cmd = Command::new("mariadb");
        cmd.arg("-h127.0.0.1")
            .arg(format!("-P{port}"))
            .arg(format!("-u{user}"))
            .arg(format!("--password={password}"))
            .args(["-N", "-B"])
            .arg(tests::connect_timeout_arg(30))
            .args(verified(&certs, "good-ca.pem"))
            .arg("-e")
            .arg(sql);
        run_with_input(&mut cmd, b"", Duration::from_secs(90))
    };
    let run = |user: &str, password: &str, sql: &str| on(relay.port, user, password, sql);
    // root keeps mysql_native_password, which a dual relay cannot complete: it sets up on
    // MariaDB's own address, over MariaDB's own TLS.
    let (status, body) = relay.admin("POST", "/v1/instances/demo/resume");
    assert_eq!(status, 200, "{body}\n{}", relay.log());
    assert!(Relay::wait_until(Duration::from_secs(60), || relay.state() == "running"));
    let out = on(
        relay.compute_port,
        "root",
        "",
        &format!(
            "CREATE USER {USER}@'%' IDENTIFIED VIA perceptron_dual USING PASSWORD('{PASSWORD}');\
             GRANT ALL ON *.* TO {USER}@'%'"
        ),
    );
    assert_eq!(out.code, Some(0), "{out:?}\n{}", relay.log());

    // Paused: TLS to the relay, the relayed-auth payload to the plugin inside TLS.
    let (status, body) = relay.admin("POST", "/v1/instances/demo/pause?force=true");
    assert_eq!(status, 200, "{body}");
    let out = run(
        USER,
        PASSWORD,
        "SELECT CURRENT_USER(); SHOW STATUS LIKE 'Ssl_version'",
    );
    assert_eq!(out.code, Some(0), "{out:?}\n{}", relay.log());
    assert!(
        out.stdout
            .starts_with(&format!("{USER}@%\nSsl_version\tTLSv1.")),
        "{out:?}"
    );
    assert_eq!(
        relay.metric("relay_connections_total{instance=\"demo\",outcome=\"relayed\"}"),
        1.0
    );
    // Running: the relay still relays the login, inside TLS on both legs; on MariaDB's own
    // address the plugin checks the client's native answer inside MariaDB's TLS.
    let out = run(USER, PASSWORD, "SHOW STATUS LIKE 'Ssl_version'");
    assert_eq!(out.code, Some(0), "{out:?}\n{}", relay.log());
    assert!(out.stdout.starts_with("Ssl_version\tTLSv1."), "{out:?}");
    assert_eq!(
        relay.metric("relay_connections_total{instance=\"demo\",outcome=\"relayed\"}"),
        2.0
    );
    let out = on(
        relay.compute_port,
        USER,
        PASSWORD,
        "SHOW STATUS LIKE 'Ssl_version'",
    );
    assert_eq!(out.code, Some(0), "{out:?}\n{}", relay.log());
    assert!(out.stdout.starts_with("Ssl_version\tTLSv1."), "{out:?}");
}

/// A resumable session whose compute leg is in TLS is carried to a new login in TLS too, and
/// its commands go on there: before, the reattach kept numbering packets as after the
/// SSLRequest, and MariaDB closed the new connection at the first one (aiomysql's own suite
/// found it, BENCHMARKS.md section 21).
#[test]
fn a_resumable_session_is_carried_to_a_new_login_over_tls_to_mariadb() {
    let dir = TempDir::new("relay-tls-maria-resume");
    let certs = Certs::new(dir.path());
    let ticket_key = dir.path().join("tickets.key");
    tests::relay::keygen(&ticket_key, "tickets-1");
    let args = [
        format!("--ssl-cert={}", certs.path("good-server.pem")),
        format!("--ssl-key={}", certs.path("good-server.key")),
        format!(
            "--loose-perceptron-dual-ticket-key-file={}",
            ticket_key.display()
        ),
        "--loose-perceptron-dual-instance=demo".to_owned(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let ca = certs.path("good-ca.pem");
    let relay = tests::mariadb::dual_relay_with(
        dir.path(),
        &args,
        &format!(
            "resumable_sessions = true\nstop_after = \"1h\"\nforce_reattach_every = 1\n\
             compute_tls = \"verify\"\n\
             compute_ca = \"{ca}\"\ncompute_tls_name = \"localhost\"\n"
        ),
    );
    relay.resume();
    // root (no password) on MariaDB's own address: every login through the relay is the
    // relay's.
    let mut cmd = Command::new("mariadb");
    cmd.arg("-h127.0.0.1")
        .arg(format!("-P{}", relay.compute_port))
        .args(["-uroot", "--skip-ssl", "-e"])
        .arg(format!(
            "CREATE USER {USER}@'%' IDENTIFIED VIA perceptron_dual USING PASSWORD('{PASSWORD}');\
             GRANT ALL ON *.* TO {USER}@'%'"
        ));
    let out = run_with_input(&mut cmd, b"", Duration::from_secs(60));
    assert_eq!(out.code, Some(0), "{out:?}\n{}", relay.log());
    let mut s = tests::raw::login(relay.port, USER, PASSWORD, None)
        .unwrap()
        .unwrap();
    s.set_read_timeout(Some(tests::scaled(Duration::from_secs(60))))
        .unwrap();
    for _ in 0..3 {
        let version = tests::raw::one_row(
            &mut s,
            "SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS \
             WHERE VARIABLE_NAME = 'SSL_VERSION'",
        );
        assert!(
            version.as_deref().is_some_and(|v| v.starts_with("TLSv1.")),
            "{version:?}\n{}",
            relay.log()
        );
    }
    assert!(
        relay.log_count("session reattached by force") >= 2,
        "{}",
        relay.log()
    );
}

/// `client_ca` alone (without `require_secure_transport`) holds on every route into the
/// instance: a plaintext login on its own listener is refused with 3159, and a login through
/// an endpoint that does not check client certificates against the instance's CA is refused
/// with 1045; neither wakes the instance.
#[test]
fn client_ca_alone_holds_on_the_instances_listener_and_through_an_endpoint() {
    let dir = TempDir::new("relay-tls-client-ca-routes");
    let certs = Certs::new(dir.path());
    let endpoint = tests::free_port();
    let instance_toml = certs
        .instance_toml(true)
        .replace("require_secure_transport = true\n", "")
        + &format!(
            "\n[[endpoint]]\nlisten = \"127.0.0.1:{endpoint}\"\nroute_by = \"user@instance\"\n"
        );
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            instance_toml,
            ..RelayOptions::default()
        },
    );
    match tests::raw::login(relay.port, USER, PASSWORD, None).unwrap() {
        Err((code, _)) => assert_eq!(code, 3159, "{}", relay.log()),
        Ok(_) => panic!("a plaintext login reached an instance with client_ca"),
    }
    match tests::raw::login(endpoint, &format!("{USER}@demo"), PASSWORD, None).unwrap() {
        Err((code, _)) => assert_eq!(code, 1045, "{}", relay.log()),
        Ok(_) => panic!("an endpoint without client certificates reached it"),
    }
    assert!(relay.logged("TLS policy"), "{}", relay.log());
    assert_eq!(relay.state(), "paused");
    assert!(!relay.compute_listening());
}
