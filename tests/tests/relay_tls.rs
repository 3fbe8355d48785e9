//! TLS on the client leg, end to end (issue 16): the relay terminates MySQL's in-band TLS on
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

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use authplugin::packet::HandshakeV10;
use authplugin::packet::capabilities::CLIENT_SSL;
use tests::relay::{PASSWORD, Relay, RelayOptions, USER};
use tests::{Output, TempDir, bin_path, run_with_input, wait_for_greeting};

/// Runs `openssl` with `args` in `dir`.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA (`<name>-ca.pem`) in `dir`, and a certificate `<name>-<leaf>.pem` with its key
/// (`.key`, mode 0600) signed by it for each `(leaf, extensions)`.
fn pki(dir: &Path, name: &str, leaves: &[(&str, &str)]) {
    let ca = format!("{name}-ca");
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &format!("{ca}.key"),
            "-out",
            &format!("{ca}.pem"),
            "-days",
            "30",
            "-subj",
            &format!("/CN={name} test CA"),
        ],
    );
    for (leaf, ext) in leaves {
        let base = format!("{name}-{leaf}");
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &format!("{base}.key"),
                "-out",
                &format!("{base}.csr"),
                "-subj",
                &format!("/CN={leaf}"),
            ],
        );
        std::fs::write(dir.join(format!("{base}.ext")), ext).unwrap();
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{base}.csr"),
                "-CA",
                &format!("{ca}.pem"),
                "-CAkey",
                &format!("{ca}.key"),
                "-CAcreateserial",
                "-out",
                &format!("{base}.pem"),
                "-days",
                "30",
                "-extfile",
                &format!("{base}.ext"),
            ],
        );
        std::fs::set_permissions(
            dir.join(format!("{base}.key")),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
    }
}

const SERVER_EXT: &str = "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
                          extendedKeyUsage=serverAuth\n";
const CLIENT_EXT: &str = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n";

/// Certificates for one test: `good` (the relay's, and a client certificate), `other` (a CA
/// the relay does not use, and a client certificate it signed).
struct Certs {
    dir: PathBuf,
}

impl Certs {
    fn new(dir: &Path) -> Self {
        let dir = dir.join("certs");
        std::fs::create_dir_all(&dir).unwrap();
        pki(
            &dir,
            "good",
            &[("server", SERVER_EXT), ("client", CLIENT_EXT)],
        );
        pki(&dir, "other", &[("client", CLIENT_EXT)]);
        Self { dir }
    }

    fn path(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }

    /// The `[[instance]]` lines that turn TLS on (and require it).
    fn instance_toml(&self, client_ca: bool) -> String {
        format!(
            "require_secure_transport = true\n[instance.tls]\ncert = \"{}\"\nkey = \"{}\"\n{}",
            self.path("good-server.pem"),
            self.path("good-server.key"),
            if client_ca {
                format!("client_ca = \"{}\"\n", self.path("good-ca.pem"))
            } else {
                String::new()
            }
        )
    }
}

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
        .args(["-N", "-B", "--connect-timeout=10"]);
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
    assert!(relay.log().contains("relayed login accepted"));
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

/// The capability flags of the greeting on `port` (relay's while paused, the compute's on the
/// direct route).
fn greeting_flags(port: u16) -> u32 {
    let payload = wait_for_greeting(port, Instant::now() + Duration::from_secs(10)).unwrap();
    HandshakeV10::decode(&payload).unwrap().capability_flags
}

#[test]
fn the_direct_route_offers_the_same_tls_and_the_shim_terminates_it() {
    let dir = TempDir::new("relay-tls-direct");
    let certs = Certs::new(dir.path());
    // The managed server-shim serves the relay's certificate and requires TLS too.
    let command = vec![
        bin_path("server-shim").display().to_string(),
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
            instance_toml: certs.instance_toml(false),
            ..RelayOptions::default()
        },
    );
    let paused = greeting_flags(relay.port);
    assert_ne!(paused & CLIENT_SSL, 0, "the relay offers TLS");

    // The perceptron route wakes the instance over TLS; the relayed login to the shim is
    // plaintext and accepted (its require_secure_transport is for clients).
    let out = mariadb(relay.port, &verified(&certs, "good-ca.pem"), "SELECT 1");
    assert_eq!(out.code, Some(0), "{out:?}\n{}", relay.log());
    assert_eq!(relay.state(), "running");

    // Running: new connections take the direct route, where the shim greets and terminates
    // TLS itself, with the same offer.
    let running = greeting_flags(relay.port);
    assert_ne!(running & CLIENT_SSL, 0, "the compute offers TLS too");
    let out = mariadb(
        relay.port,
        &verified(&certs, "good-ca.pem"),
        "SELECT 7 * 6; SELECT USER()",
    );
    assert_eq!(out.code, Some(0), "{out:?}\n{}", relay.log());
    assert_eq!(out.stdout, "42\napp@127.0.0.1\n");
    assert!(
        relay.log_count("route=\"direct\"") >= 1,
        "the shim saw a direct login:\n{}",
        relay.log()
    );
    // Without TLS on the direct route: the shim's own ERR 3159.
    let out = mariadb(relay.port, &[], "SELECT 1");
    assert!(out.stderr.contains("ERROR 3159 (HY000)"), "{out:?}");
    // A client that trusts another CA refuses the shim's certificate as it refused the relay's.
    let out = mariadb(relay.port, &verified(&certs, "other-ca.pem"), "SELECT 1");
    assert!(out.stderr.contains("ERROR 2026"), "{out:?}");
}
